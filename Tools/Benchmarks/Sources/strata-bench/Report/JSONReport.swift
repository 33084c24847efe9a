import Foundation

/// The report as JSON (`--json FILE`):
/// `{"machine": {...}, "date": ..., "workloads": {"W1_import": {"unit": ..., "strata": x, "lmdb": y, "grdb": z}, ...}}`.
/// Each workload also has `"lmdb-indexed"` (raw LMDB writing Strata's entries) and `"grdb-indexed"`
/// (GRDB's table with Strata's Track indexes), both null outside W1–W3 (`grdb-indexed` also has W10).
/// Keys whose feature does not exist yet carry null values and `"status": "not available"`.
enum JSONReport {
    static func data(_ report: Report, machine: MachineInfo, date: Date, command: String, sizes: BenchSizes, quick: Bool,
                     rounds: Int, wallSeconds: Double, otherCPUSeconds: Double) throws -> Data {
        var workloads: [String: Any] = [:]
        for r in report.results {
            var entry: [String: Any] = ["unit": r.unit]
            var samples: [String: [Double]] = [:]
            for engine in Engine.allCases {
                entry[engine.rawValue] = r.values[engine].flatMap { $0.isFinite ? $0 : nil } ?? NSNull()
                if let s = r.samples[engine] { samples[engine.rawValue] = s.filter(\.isFinite) }
            }
            if !samples.isEmpty { entry["samples"] = samples }
            switch r.status {
            case .measured: break
            case .notAvailable:
                entry["value"] = NSNull()
                entry["status"] = r.status.text
            default:
                entry["status"] = r.status.text
            }
            workloads[r.key] = entry
        }
        var targets: [[String: Any]] = []
        for t in Target.all {
            let v = t.verdict(report)
            let r = t.rounds(report)
            targets.append(["target": t.name, "measured": v.measured.map { $0 as Any } ?? NSNull(),
                            "met": v.met.map { $0 as Any } ?? NSNull(), "verdict": v.text,
                            "rounds": r.figures, "roundsMet": r.met])
        }
        let root: [String: Any] = [
            "targets": targets,
            "machine": [
                "cores": machine.cores,
                "memoryBytes": machine.memoryBytes,
                "kernel": machine.kernel,
                "dataFileSystem": machine.dataFileSystem,
                "dataDevice": machine.dataDevice,
            ],
            "date": ISO8601DateFormatter().string(from: date),
            "command": command,
            "quick": quick,
            "rounds": rounds,
            "wallSeconds": wallSeconds,
            "otherProcessesCPUSeconds": otherCPUSeconds,
            "sizes": sizes.dictionary,
            "workloads": workloads,
        ]
        return try JSONSerialization.data(withJSONObject: root, options: [.prettyPrinted, .sortedKeys])
    }
}
