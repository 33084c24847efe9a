import Foundation

/// The report as a plain-text table for stdout.
enum TableRenderer {
    static func render(_ report: Report) -> String {
        // lmdb+idx is raw LMDB writing Strata's entries (W1–W3 only): the equal-work floor;
        // grdb+idx is GRDB's table with Strata's Track indexes (W1–W3 and W10).
        let header = ["workload", "unit", "strata", "lmdb", "lmdb+idx", "grdb", "grdb+idx",
                      "strata/lmdb", "strata/lmdb+idx", "strata/grdb", "strata/grdb+idx"]
        var rows: [[String]] = []
        for r in report.results {
            let v = r.values
            let figures = [number(v.strata), number(v.lmdb), number(v.lmdbIndexed), number(v.grdb), number(v.grdbIndexed),
                           ratio(v.strata, v.lmdb), ratio(v.strata, v.lmdbIndexed), ratio(v.strata, v.grdb),
                           ratio(v.strata, v.grdbIndexed)]
            switch r.status {
            case .measured: rows.append([r.key, r.unit] + figures)
            case .failed: rows.append([r.key + " (FAILED)", r.unit] + figures)
            default: rows.append([r.key, r.unit, r.status.text] + Array(repeating: "", count: header.count - 3))
            }
        }
        let widths = header.indices.map { c in ([header] + rows).map { $0[c].count }.max() ?? 0 }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { c, s in
                c < 2 ? s.padding(toLength: widths[c], withPad: " ", startingAt: 0)
                    : String(repeating: " ", count: widths[c] - s.count) + s
            }.joined(separator: "  ")
        }
        var out = line(header) + "\n"
        out += widths.map { String(repeating: "-", count: $0) }.joined(separator: "  ") + "\n"
        for row in rows { out += line(row) + "\n" }
        for r in report.results {
            if case .failed(let why) = r.status { out += "\(r.key) failed: \(why)\n" }
        }
        return out
    }

    static func number(_ v: Double?) -> String {
        guard let v, v.isFinite else { return "—" }
        if v >= 1000 {
            let f = NumberFormatter()
            f.numberStyle = .decimal
            f.maximumFractionDigits = 0
            return f.string(from: NSNumber(value: v.rounded())) ?? String(Int(v))
        }
        if v >= 100 { return String(format: "%.0f", v) }
        if v >= 10 { return String(format: "%.1f", v) }
        return String(format: "%.2f", v)
    }

    static func ratio(_ a: Double?, _ b: Double?) -> String {
        guard let a, let b, b != 0, a.isFinite, b.isFinite else { return "—" }
        let r = a / b
        return r >= 10 ? String(format: "%.1f×", r) : String(format: "%.2f×", r)
    }
}
