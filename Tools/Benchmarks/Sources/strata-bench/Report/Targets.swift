import Foundation

/// Strata's performance targets (BENCHMARKS.md), checked against a report.
struct Target: Sendable {
    enum Bound: Sendable { case atLeast, atMost }

    let name: String
    let bound: Bound
    let threshold: Double
    /// The measured figure (a ratio, or MB), or nil when its inputs were not measured.
    let measure: @Sendable (Report) -> Double?

    static let all: [Target] = [
        Target(name: "W1 import ≥ 0.5× raw LMDB", bound: .atLeast, threshold: 0.5) { ratio($0, "W1_import", .strata, .lmdb) },
        Target(name: "W1 import ≥ 3× GRDB", bound: .atLeast, threshold: 3) { ratio($0, "W1_import", .strata, .grdb) },
        Target(name: "W1 peak RSS ≤ 200 MB", bound: .atMost, threshold: 200) { $0.value("W1_peak_rss_mb", .strata) },
        Target(name: "W2 durable ≥ 0.9× raw LMDB", bound: .atLeast, threshold: 0.9) { ratio($0, "W2_small_tx", .strata, .lmdb) },
        Target(name: "W2 relaxed ≥ GRDB default", bound: .atLeast, threshold: 1) { ratio($0, "W2_small_tx_relaxed", .strata, .grdb) },
        Target(name: "W3 16 savers ≥ 8× 1 saver", bound: .atLeast, threshold: 8) {
            ratio($0, "W3_group_commit_16", .strata, over: "W3_group_commit_1", .strata)
        },
        Target(name: "W4 point reads ≥ 0.5× raw LMDB", bound: .atLeast, threshold: 0.5) { ratio($0, "W4_point_reads", .strata, .lmdb) },
        Target(name: "W4 point reads ≥ 3× GRDB", bound: .atLeast, threshold: 3) { ratio($0, "W4_point_reads", .strata, .grdb) },
        Target(name: "W5 snapshot open ≥ 50× GRDB", bound: .atLeast, threshold: 50) { ratio($0, "W5_snapshot_open", .strata, .grdb) },
        Target(name: "W6 reader p99 during import ≤ 1.5× idle", bound: .atMost, threshold: 1.5) {
            ratio($0, "W6_reader_p99_import_us", .strata, over: "W6_reader_p99_idle_us", .strata)
        },
        Target(name: "W7 child commit ≤ 1.2× direct save", bound: .atMost, threshold: 1.2) { $0.value("W7_child_commit_ratio", .strata) },
        Target(name: "W7 fetch with 100k pending ≤ 2× none", bound: .atMost, threshold: 2) { $0.value("W7_child_fetch_ratio", .strata) },
        Target(name: "W8 verify ≥ 1M changes/s", bound: .atLeast, threshold: 1_000_000) { $0.value("W8_verify", .strata) },
        Target(name: "W9 size after ≤ 1.5× live bytes", bound: .atMost, threshold: 1.5) { $0.value("W9_compaction_size_ratio", .strata) },
        Target(name: "W9 compaction ≥ 0.5× mdb_copy -c", bound: .atLeast, threshold: 0.5) { ratio($0, "W9_compaction_mb_per_s", .strata, .lmdb) },
        Target(name: "W10 migration ≥ 1× GRDB update", bound: .atLeast, threshold: 1) { ratio($0, "W10_migration", .strata, .grdb) },
        Target(name: "W11 library into an empty store ≥ 3× GRDB", bound: .atLeast, threshold: 3) {
            ratio($0, "W11_library_empty", .strata, .grdb)
        },
        Target(name: "W11 library ≥ 150k records/s", bound: .atLeast, threshold: 150_000) { $0.value("W11_library_empty", .strata) },
        Target(name: "W11 a tenth more ≥ 50k records/s", bound: .atLeast, threshold: 50_000) { $0.value("W11_library_more", .strata) },
        Target(name: "W11 catalog into an empty store ≥ 3× GRDB", bound: .atLeast, threshold: 3) {
            ratio($0, "W11_catalog_empty", .strata, .grdb)
        },
        Target(name: "W11 storectl: library ≥ 3× GRDB", bound: .atLeast, threshold: 3) {
            ratio($0, "W11_storectl_library_empty", .strata, over: "W11_library_empty", .grdb)
        },
        Target(name: "W11 storectl: library ≥ 150k records/s", bound: .atLeast, threshold: 150_000) {
            $0.value("W11_storectl_library_empty", .strata)
        },
        Target(name: "W11 storectl: a tenth more ≥ 50k records/s", bound: .atLeast, threshold: 50_000) {
            $0.value("W11_storectl_library_more", .strata)
        },
        Target(name: "W11 storectl: catalog ≥ 3× GRDB", bound: .atLeast, threshold: 3) {
            ratio($0, "W11_storectl_catalog_empty", .strata, over: "W11_catalog_empty", .grdb)
        },
        Target(name: "W11 bytes written ≤ 3× the file", bound: .atMost, threshold: 3) { $0.value("W11_written_over_file", .strata) },
        Target(name: "W11 fresh file ≤ 1.3× compacted", bound: .atMost, threshold: 1.3) {
            $0.value("W11_fresh_over_compacted", .strata)
        },
        Target(name: "W11 reader p99 during a bulk import ≤ 1.5× idle", bound: .atMost, threshold: 1.5) {
            ratio($0, "W11_reader_p99_bulk_us", .strata, over: "W11_reader_p99_idle_us", .strata)
        },
        Target(name: "W11 compacted file ≤ 2× GRDB's", bound: .atMost, threshold: 2) {
            ratio($0, "W11_file_mb_compacted", .strata, .grdb)
        },
        Target(name: "W12 commit on A → visible on B p99 ≤ 50 ms", bound: .atMost, threshold: 50) {
            $0.value("W12_visible_p99_ms", .strata)
        },
        Target(name: "W12 16 durable savers over 3 replicas ≥ 0.5× one machine", bound: .atLeast, threshold: 0.5) {
            $0.value("W12_durable_over_one_machine", .strata)
        },
        Target(name: "W12 catch-up ≥ 100k changes/s", bound: .atLeast, threshold: 100_000) {
            $0.value("W12_catchup_changes_per_s", .strata)
        },
        Target(name: "W12 reads on a replica ≥ 0.9× detached (W4 unchanged)", bound: .atLeast, threshold: 0.9) {
            $0.value("W12_replica_reads_ratio", .strata)
        },
    ] + W13Catalog.keys.map { key in
        // Times: Strata's over GRDB's, at most 2.
        Target(name: "W13 \(key.dropFirst(4).dropLast(3).replacingOccurrences(of: "_", with: " ")) ≤ 2× GRDB",
               bound: .atMost, threshold: 2) { ratio($0, key, .strata, .grdb) }
    }

    /// Strata over an equal-work engine (`lmdb-indexed` or `grdb-indexed`) for the write
    /// workloads it measured.
    static func equalWorkRatios(_ report: Report, against engine: Engine) -> [(String, Double)] {
        // W3 with several savers is left out: raw LMDB and GRDB commit one writer at a time,
        // Strata groups the savers' transactions, so the ratio would measure group commit, not
        // the cost of the same writes.
        let keys = [("W1 import", "W1_import"), ("W2 durable", "W2_small_tx"), ("W2 relaxed", "W2_small_tx_relaxed"),
                    ("W3 1 saver", "W3_group_commit_1"), ("W10 migration", "W10_migration")]
        return keys.compactMap { name, key in ratio(report, key, .strata, engine).map { (name, $0) } }
    }

    /// `W3_commits_of_16` over `W3_group_commit_1`, per engine that measured both.
    static func groupCommitCeilings(_ report: Report) -> [(Engine, Double)] {
        Engine.allCases.compactMap { e in
            guard let a = report.value("W3_commits_of_16", e), let b = report.value("W3_group_commit_1", e), b > 0 else { return nil }
            return (e, a / b)
        }
    }

    static func ratio(_ r: Report, _ key: String, _ a: Engine, _ b: Engine) -> Double? {
        ratio(r, key, a, over: key, b)
    }

    /// Figure `key` of engine `a` over figure `other` of engine `b`; nil when either is missing
    /// or the second is not positive.
    static func ratio(_ r: Report, _ key: String, _ a: Engine, over other: String, _ b: Engine) -> Double? {
        guard let x = r.value(key, a), let y = r.value(other, b), y > 0 else { return nil }
        return x / y
    }

    /// "met", or how far off: "missed: needs 12.5× more" / "missed: 3.2× over".
    func verdict(_ report: Report) -> (measured: Double?, met: Bool?, text: String) {
        guard let m = measure(report), m.isFinite else { return (nil, nil, "not measured") }
        switch bound {
        case .atLeast:
            return m >= threshold ? (m, true, "met") : (m, false, String(format: "MISSED: %.2f× short", threshold / max(m, 1e-12)))
        case .atMost:
            return m <= threshold ? (m, true, "met") : (m, false, String(format: "MISSED: %.2f× over", m / threshold))
        }
    }

    /// The target's figure in each round of the run (see ``Report/round(_:)``), and how many of
    /// them meet it; empty for a run of one round.
    func rounds(_ report: Report) -> (figures: [Double], met: Int) {
        let n = report.roundCount
        guard n > 1 else { return ([], 0) }
        let figures = (0..<n).compactMap { measure(report.round($0)) }.filter(\.isFinite)
        let met = figures.filter { bound == .atLeast ? $0 >= threshold : $0 <= threshold }.count
        return (figures, met)
    }

    /// A figure as the target's line shows it.
    func format(_ m: Double) -> String {
        if name.contains("MB") && !name.contains("mdb_copy") { return String(format: "%.0f MB", m) }
        if name.contains("changes/s") || name.contains("records/s") { return String(format: "%.0f/s", m) }
        if name.hasSuffix(" ms") { return String(format: "%.2f ms", m) }
        return String(format: "%.2f×", m)
    }

    /// The width of the names' column: the longest name and two spaces (in UTF-16 units, which
    /// `padding(toLength:)` counts).
    static let nameWidth = (all.map(\.name.utf16.count).max() ?? 40) + 2
    /// The widths of the figure's column and of the verdict's, before each round's figures.
    static let figureWidth = 11, verdictWidth = 26

    static func render(_ report: Report) -> String {
        var out = "targets, on the medians; then each round's figure and how many rounds meet the target:\n"
        for t in all {
            let v = t.verdict(report)
            let shown = v.measured.map(t.format) ?? "—"
            var line = "  " + t.name.padding(toLength: nameWidth, withPad: " ", startingAt: 0)
                + shown.padding(toLength: figureWidth, withPad: " ", startingAt: 0) + v.text
            let r = t.rounds(report)
            if !r.figures.isEmpty {
                line = line.padding(toLength: 2 + nameWidth + figureWidth + verdictWidth, withPad: " ", startingAt: 0)
                    + "rounds " + r.figures.map(t.format).joined(separator: ", ") + " (\(r.met) of \(r.figures.count) met)"
            }
            out += line + "\n"
        }
        let equalWorkEngines: [(Engine, String)] = [
            (.lmdbIndexed, "raw LMDB writing Strata's entries (lmdb-indexed)"),
            (.grdbIndexed, "GRDB with Strata's Track indexes (grdb-indexed)"),
        ]
        for (engine, what) in equalWorkEngines {
            let equalWork = equalWorkRatios(report, against: engine)
            guard !equalWork.isEmpty else { continue }
            out += "equal work (not targets): Strata over \(what):\n"
            for (name, r) in equalWork {
                out += "  " + name.padding(toLength: nameWidth, withPad: " ", startingAt: 0) + String(format: "%.2f×", r) + "\n"
            }
        }
        let ceilings = groupCommitCeilings(report)
        if !ceilings.isEmpty {
            out += "W3 ceiling (not a target): 16 records per commit by one saver over 1 per commit, the most 16 savers can gain by grouping:\n"
            for (engine, r) in ceilings {
                out += "  " + engine.rawValue.padding(toLength: nameWidth, withPad: " ", startingAt: 0) + String(format: "%.2f×", r) + "\n"
            }
        }
        return out
    }
}
