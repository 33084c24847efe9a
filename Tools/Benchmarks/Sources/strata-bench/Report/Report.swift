/// One figure per engine for one workload key (nil where an engine has no such figure).
struct EngineValues: Sendable {
    var strata: Double?
    var lmdb: Double?
    var grdb: Double?
    var lmdbIndexed: Double?
    var grdbIndexed: Double?

    subscript(engine: Engine) -> Double? {
        get {
            switch engine {
            case .strata: strata
            case .lmdb: lmdb
            case .grdb: grdb
            case .lmdbIndexed: lmdbIndexed
            case .grdbIndexed: grdbIndexed
            }
        }
        set {
            switch engine {
            case .strata: strata = newValue
            case .lmdb: lmdb = newValue
            case .grdb: grdb = newValue
            case .lmdbIndexed: lmdbIndexed = newValue
            case .grdbIndexed: grdbIndexed = newValue
            }
        }
    }
}

/// The result of one workload key.
struct WorkloadResult: Sendable {
    enum Status: Sendable, Equatable {
        case measured
        /// The feature it measures does not exist yet.
        case notAvailable
        /// Left out of this run (`--only`).
        case skipped
        case failed(String)

        var text: String {
            switch self {
            case .measured: "measured"
            case .notAvailable: "not available"
            case .skipped: "skipped"
            case .failed(let why): "failed: \(why)"
            }
        }
    }

    let key: String
    let unit: String
    /// The median of each engine's samples.
    var values = EngineValues()
    /// Every round's figure, per engine.
    var samples: [Engine: [Double]] = [:]
    var status: Status
    /// For latencies and memory; ratios then read "smaller is better".
    let lowerIsBetter: Bool
}

/// Every workload key, in order, with its unit. Keys that a run did not fill keep
/// their placeholder status, so the JSON always has the same shape.
struct Report: Sendable {
    private(set) var results: [WorkloadResult]

    static let unavailableKeys: Set<String> = []

    init() {
        let layout: [(String, String, Bool)] = [
            ("W1_import", "records/s", false),
            ("W1_peak_rss_mb", "MB", true),
            ("W2_small_tx", "tx/s", false),
            ("W2_small_tx_relaxed", "tx/s", false),
            ("W2_small_tx_async", "tx/s", false),
            ("W2_small_tx_relaxed_async", "tx/s", false),
            ("W3_group_commit_1", "tx/s", false),
            ("W3_group_commit_4", "tx/s", false),
            ("W3_group_commit_16", "tx/s", false),
            ("W3_group_commit_64", "tx/s", false),
            ("W3_commits_of_16", "tx/s", false),
            ("W4_point_reads", "reads/s", false),
            ("W5_snapshot_open", "opens/s", false),
            ("W6_reader_p50_idle_us", "µs", true),
            ("W6_reader_p99_idle_us", "µs", true),
            ("W6_reader_p50_import_us", "µs", true),
            ("W6_reader_p99_import_us", "µs", true),
            ("W6g_save_p50_idle_ms", "ms", true),
            ("W6g_save_p99_idle_ms", "ms", true),
            ("W6g_save_max_idle_ms", "ms", true),
            ("W6g_save_p50_export_ms", "ms", true),
            ("W6g_save_p99_export_ms", "ms", true),
            ("W6g_save_max_export_ms", "ms", true),
            ("W7_child_commit_ratio", "ratio", true),
            ("W7_child_fetch_ratio", "ratio", true),
            ("W8_verify", "changes/s", false),
            ("W8_asof_100_back_ms", "ms", true),
            ("W9_compaction_size_ratio", "ratio", true),
            ("W9_size_over_record_bytes", "ratio", true),
            ("W9_compaction_mb_per_s", "MB/s", false),
            ("W9_mdb_copy_mb_per_s", "MB/s", false),
            ("W9_mdb_copy_synced_mb_per_s", "MB/s", false),
            ("W10_migration", "objects/s", false),
            ("W11_library_empty", "records/s", false),
            ("W11_library_incremental", "records/s", false),
            ("W11_library_more", "records/s", false),
            ("W11_catalog_empty", "records/s", false),
            ("W11_written_over_file", "ratio", true),
            ("W11_file_mb_fresh", "MB", true),
            ("W11_file_mb_compacted", "MB", true),
            ("W11_fresh_over_compacted", "ratio", true),
            ("W11_reader_p99_idle_us", "µs", true),
            ("W11_reader_p99_bulk_us", "µs", true),
            ("W11_validation_mb_per_s", "MB/s", false),
            ("W11_csv_validation_mb_per_s", "MB/s", false),
            ("W11_storectl_library_empty", "records/s", false),
            ("W11_storectl_library_more", "records/s", false),
            ("W11_storectl_catalog_empty", "records/s", false),
            ("W12_visible_p50_ms", "ms", true),
            ("W12_visible_p99_ms", "ms", true),
            ("W12_durable_16", "tx/s", false),
            ("W12_durable_over_one_machine", "ratio", false),
            ("W12_durable_16_relaxed_replicas", "tx/s", false),
            ("W12_durable_relaxed_over_one_machine", "ratio", false),
            ("W12_catchup_changes_per_s", "changes/s", false),
            ("W12_join_seconds", "s", true),
            ("W12_join_mb", "MB", true),
            ("W12_replica_reads_ratio", "ratio", false),
            ("W12_replica_reads_under_load_ratio", "ratio", false),
        ] + W13Catalog.keys.map { ($0, "ms", true) }
        results = layout.map { key, unit, lower in
            WorkloadResult(key: key, unit: unit, status: Self.unavailableKeys.contains(key) ? .notAvailable : .skipped, lowerIsBetter: lower)
        }
    }

    /// Records one engine's samples of `key`; its figure is their median.
    mutating func record(_ key: String, _ engine: Engine, samples: [Double]) {
        guard let i = results.firstIndex(where: { $0.key == key }) else { preconditionFailure("unknown workload key \(key)") }
        guard !samples.isEmpty else { return }
        results[i].samples[engine] = samples
        results[i].values[engine] = Self.median(samples)
        if case .failed = results[i].status { return }
        results[i].status = .measured
    }

    /// Marks `keys` failed (an engine's figures that were measured are kept).
    mutating func fail(_ keys: [String], _ engine: Engine, _ error: Error) {
        for key in keys {
            guard let i = results.firstIndex(where: { $0.key == key }) else { continue }
            let message = "\(engine.rawValue): \(error)"
            if case .failed(let earlier) = results[i].status {
                results[i].status = .failed(earlier + "; " + message)
            } else {
                results[i].status = .failed(message)
            }
        }
    }

    static func median(_ xs: [Double]) -> Double {
        let s = xs.sorted()
        return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
    }

    func value(_ key: String, _ engine: Engine) -> Double? { results.first { $0.key == key }?.values[engine] }

    /// Every round's sample of `key` for `engine`, in round order.
    func samples(_ key: String, _ engine: Engine) -> [Double]? { results.first { $0.key == key }?.samples[engine] }

    /// The most rounds any figure of the report has.
    var roundCount: Int {
        results.map { r in r.samples.values.map(\.count).max() ?? 0 }.max() ?? 0
    }

    /// The report as round `index` alone measured it: each figure is that round's sample, or the
    /// median where the figure has fewer rounds (a workload that failed in a round).
    /// Rounds interleave the engines, so a ratio of one round's figures compares measurements
    /// made minutes apart rather than the medians of the whole run.
    func round(_ index: Int) -> Report {
        precondition(index >= 0, "round index must not be negative")
        var copy = self
        for i in copy.results.indices {
            for (engine, samples) in copy.results[i].samples where index < samples.count {
                copy.results[i].values[engine] = samples[index]
            }
        }
        return copy
    }
}
