/// How much work each workload does. `full` is the size the targets are set for; `quick` is a CI smoke run.
struct BenchSizes: Sendable {
    /// W1: records imported per engine.
    var importRecords: Int
    /// Records per import transaction (W1, W4 and W6 loads).
    var batchSize = 10_000
    /// W2: one-record transactions, one after another.
    var smallTransactions: Int
    /// W3: transactions per saver count, split evenly between the savers.
    var groupCommitTransactions: Int
    var saverCounts = [1, 4, 16, 64]
    /// W4: records in the store, and random fetches from one snapshot.
    var pointReadRecords: Int
    var pointReads: Int
    /// W5: snapshot open/close pairs timed at a time, repeated until `snapshotSeconds` have passed
    /// (an engine that opens millions a second would otherwise be timed for a few hundredths of a
    /// second, which one preemption or a busy neighbour swings by a third).
    var snapshotOpens: Int
    var snapshotSeconds = 1.0
    /// W6: records present before reading, timed reader operations while idle, and records
    /// imported (in `batchSize` transactions) while a reader runs.
    var latencyPreload: Int
    var latencyReads: Int
    var latencyImportRecords: Int
    /// W6g: the small initial map, the tracks preloaded into it, the saves (of `exportGrowthBatch`
    /// tracks each) timed while they grow it, and how long the slow export they run beside lasts.
    var exportGrowthMapBytes = 8 << 20
    var exportGrowthPreload = 10_000
    var exportGrowthSaves = 200
    var exportGrowthBatch = 100
    var exportSeconds = 10.0
    /// W7: changes made in a child and committed; pending changes a child holds for the fetch.
    var childChanges = 10_000
    var childPending = 100_000
    /// W7: direct-save / child-commit pairs per round (each side into its own fresh store); the
    /// round's ratio is the child's total time over the direct saves' total.
    var childPairs = 5
    /// W8: records inserted then updated once before `verify()`.
    var verifyRecords = 500_000
    /// W9: objects inserted then updated once before compaction.
    var compactionObjects = 1_000_000
    /// W10: objects migrated.
    var migrationObjects = 1_000_000
    /// W13: packages of the generated catalog (about 4 dependencies each), and answers timed per
    /// question (a fifth of them for the two that read every package).
    var catalogPackages = 60_000
    var catalogRepeats = 20
    /// W11: records of the generated library imported into an empty store (a tenth as many more
    /// are imported after them), and of the generated link-heavy catalog.
    var importFileRecords = 200_000
    var catalogImportRecords = 60_000
    /// W12: seconds of the steady 1,000 tx/s load over three writers; durable saves per saver
    /// (16 savers; 24,000 saves take one machine 2–3 s here, shorter runs swung by a third);
    /// transactions of 100 changes a replica catches up on; objects of the store a new replica
    /// joins from.
    var clusterSteadySeconds = 5.0
    var clusterSavesPerSaver = 1_500
    var clusterCatchUpTransactions = 2_000
    var clusterJoinRecords = 1_000_000

    static let full = BenchSizes(
        importRecords: 1_000_000, smallTransactions: 10_000, groupCommitTransactions: 2_048,
        pointReadRecords: 1_000_000, pointReads: 1_000_000, snapshotOpens: 200_000,
        latencyPreload: 100_000, latencyReads: 50_000, latencyImportRecords: 300_000)

    static let quick = BenchSizes(
        importRecords: 100_000, smallTransactions: 1_000, groupCommitTransactions: 1_024,
        pointReadRecords: 100_000, pointReads: 200_000, snapshotOpens: 100_000, snapshotSeconds: 0.2,
        latencyPreload: 20_000, latencyReads: 20_000, latencyImportRecords: 100_000,
        exportGrowthMapBytes: 2 << 20, exportGrowthPreload: 2_000, exportGrowthSaves: 40, exportSeconds: 1.5,
        childChanges: 2_000, childPending: 10_000, childPairs: 1, verifyRecords: 20_000, compactionObjects: 20_000, migrationObjects: 20_000,
        catalogPackages: 6_000, catalogRepeats: 5, importFileRecords: 5_000, catalogImportRecords: 3_000,
        clusterSteadySeconds: 1.5, clusterSavesPerSaver: 40, clusterCatchUpTransactions: 200, clusterJoinRecords: 20_000)

    var dictionary: [String: Int] {
        ["importRecords": importRecords, "batchSize": batchSize, "smallTransactions": smallTransactions,
         "groupCommitTransactions": groupCommitTransactions, "pointReadRecords": pointReadRecords, "pointReads": pointReads,
         "snapshotOpens": snapshotOpens, "snapshotMilliseconds": Int(snapshotSeconds * 1000), "latencyPreload": latencyPreload, "latencyReads": latencyReads,
         "latencyImportRecords": latencyImportRecords, "exportGrowthMapBytes": exportGrowthMapBytes,
         "exportGrowthPreload": exportGrowthPreload, "exportGrowthSaves": exportGrowthSaves, "exportGrowthBatch": exportGrowthBatch,
         "exportMilliseconds": Int(exportSeconds * 1000), "childChanges": childChanges, "childPending": childPending, "childPairs": childPairs,
         "verifyRecords": verifyRecords, "compactionObjects": compactionObjects, "migrationObjects": migrationObjects,
         "catalogPackages": catalogPackages, "catalogRepeats": catalogRepeats,
         "importFileRecords": importFileRecords, "catalogImportRecords": catalogImportRecords,
         "clusterSteadyMilliseconds": Int(clusterSteadySeconds * 1000), "clusterSavesPerSaver": clusterSavesPerSaver,
         "clusterCatchUpTransactions": clusterCatchUpTransactions, "clusterJoinRecords": clusterJoinRecords]
    }
}
