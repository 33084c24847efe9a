import Foundation
import GRDB
import Strata

/// W13 (strata and grdb): questions a user asks of a link-heavy package catalog (`Schemas/catalog`:
/// sections, maintainers, packages with many-to-many dependencies), through Strata's query API and
/// through SQL on GRDB, on the same generated data, each answer checked against the data itself.
/// Each figure is the mean milliseconds of one answer over `catalogRepeats` answers (a fifth of
/// them for the sums, which read every package), after one untimed warm-up: the time a user
/// waits, counts included.
enum W13Catalog {
    static let keys = ["W13_sections_ms", "W13_section_counts_ms", "W13_depends_on_ms", "W13_top_depended_ms",
                       "W13_size_range_ms", "W13_size_by_section_ms"]

    /// The generated catalog: packages `pkg0…`, each in a section, with a maintainer, an installed
    /// size, and dependencies drawn so that a few packages (the low numbers: `pkg0` is the libc of
    /// this catalog) are depended on by many.
    struct Catalog {
        let sections: Int
        let maintainers: Int
        let section: [Int]
        let maintainer: [Int]
        let size: [Int]
        let depends: [[Int]]
        var packages: Int { section.count }

        init(packages: Int, sections: Int = 58, maintainers: Int = 3_000, seed: UInt64 = 13) {
            var rng = SplitMix64(seed: seed)
            self.sections = sections
            self.maintainers = maintainers
            section = (0..<packages).map { _ in Int(rng.next() % UInt64(sections)) }
            maintainer = (0..<packages).map { _ in Int(rng.next() % UInt64(maintainers)) }
            size = (0..<packages).map { _ in Int(rng.next() % 100_000) }
            depends = (0..<packages).map { p in
                let n = Int(rng.next() % 9)  // 0…8, about 4 on average
                var targets = Set<Int>()
                for _ in 0..<n {
                    // Skewed toward low numbers: the square of a uniform fraction.
                    let u = Double(rng.next() % 1_000_000) / 1_000_000
                    let t = Int(u * u * Double(packages))
                    if t != p { targets.insert(t) }
                }
                return targets.sorted()
            }
        }

        var edges: Int { depends.reduce(0) { $0 + $1.count } }

        // The answers, computed from the data.
        var perSection: [Int] { section.reduce(into: Array(repeating: 0, count: sections)) { $0[$1] += 1 } }
        var dependentsOfFirst: Int { depends.filter { $0.contains(0) }.count }
        var dependents: [Int] {
            var n = Array(repeating: 0, count: packages)
            for list in depends { for t in list { n[t] += 1 } }
            return n
        }
        var topDependedCounts: [Int] { Array(dependents.sorted(by: >).prefix(10)) }
        static let sizeRange = 10_000...10_999
        var sizeRangeCount: Int { size.filter { Self.sizeRange.contains($0) }.count }
        var sizeBySection: [Int] {
            var s = Array(repeating: 0, count: sections)
            for (p, sec) in section.enumerated() { s[sec] += size[p] }
            return s
        }
    }

    struct WrongAnswer: Error, CustomStringConvertible {
        let description: String
    }

    static func check(_ ok: Bool, _ what: @autoclosure () -> String) throws {
        if !ok { throw WrongAnswer(description: "W13: wrong answer: \(what())") }
    }

    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        let catalog = Catalog(packages: ctx.sizes.catalogPackages)
        ctx.progress("W13: \(catalog.packages) packages, \(catalog.edges) dependency edges")
        await ctx.measureRounds("W13", keys: keys, &report) { engine in
            switch engine {
            case .strata: return try await strata(ctx, catalog)
            case .grdb: return try grdb(ctx, catalog)
            default: return [:]
            }
        }
    }

    /// Mean milliseconds of `body` over `repeats` calls, after one untimed call.
    static func timed<R>(_ repeats: Int, _ body: () throws -> R) throws -> (ms: Double, result: R) {
        var result = try body()
        let seconds = try MonotonicClock.measure {
            for _ in 0..<repeats { result = try body() }
        }.seconds
        return (seconds * 1000 / Double(repeats), result)
    }

    // MARK: Strata

    static func strata(_ ctx: WorkloadContext, _ c: Catalog) async throws -> [String: Double] {
        guard let schemaDirectory = Paths.repositoryRoot?.appendingPathComponent("Schemas/catalog") else {
            throw BenchSetupError("cannot find Schemas/catalog")
        }
        let schema = try Schema.load(directory: schemaDirectory)
        let dir = try ctx.storeDirectory("W13", .strata)
        defer { ctx.remove(dir) }
        var config = StoreConfiguration()
        config.durability = .relaxed
        config.initialMapSizeBytes = ctx.setup.mapSizeBytes
        config.maxMapSizeBytes = max(config.maxMapSizeBytes, ctx.setup.mapSizeBytes)
        let store = try Store.open(at: dir, schema: schema, configuration: config)
        defer { store.close() }
        guard let sectionE = schema.entity(named: "Section"), let maintainerE = schema.entity(named: "Maintainer"),
              let packageE = schema.entity(named: "Package"),
              let inSection = packageE.relationship(named: "section"), let byMaintainer = packageE.relationship(named: "maintainer"),
              let depends = packageE.relationship(named: "depends"), let dependents = packageE.relationship(named: "dependents"),
              let name = packageE.attribute(named: "name"), let size = packageE.attribute(named: "installedSize") else {
            throw BenchSetupError("Schemas/catalog is not the catalog W13 expects")
        }
        // Load: sections and maintainers, then packages with their links, in batches.
        var sectionIDs: [ObjectID] = [], maintainerIDs: [ObjectID] = [], packageIDs: [ObjectID] = []
        var first = ChangeSet()
        for s in 0..<c.sections {
            var r = Record(entity: sectionE)
            r["name"] = .string("section\(s)")
            sectionIDs.append(r.id)
            first.insert(r)
        }
        for m in 0..<c.maintainers {
            var r = Record(entity: maintainerE)
            r["email"] = .string("m\(m)@example.org")
            r["name"] = .string("Maintainer \(m)")
            maintainerIDs.append(r.id)
            first.insert(r)
        }
        _ = try await store.save(first)
        let packages = (0..<c.packages).map { p in
            var r = Record(entity: packageE)
            r["name"] = .string("pkg\(p)")
            r["version"] = .string("1.\(p % 10)")
            r["installedSize"] = .int(Int64(c.size[p]))
            return r
        }
        packageIDs = packages.map(\.id)
        var start = 0
        while start < c.packages {
            let end = min(c.packages, start + ctx.sizes.batchSize)
            var batch = ChangeSet()
            for p in start..<end {
                batch.insert(packages[p])
                batch.link(inSection, from: packageIDs[p], to: sectionIDs[c.section[p]])
                batch.link(byMaintainer, from: packageIDs[p], to: maintainerIDs[c.maintainer[p]])
            }
            _ = try await store.save(batch)
            start = end
        }
        // Dependencies after every package exists (a package may depend on a later one).
        start = 0
        while start < c.packages {
            let end = min(c.packages, start + ctx.sizes.batchSize)
            var batch = ChangeSet()
            for p in start..<end { for t in c.depends[p] { batch.link(depends, from: packageIDs[p], to: packageIDs[t]) } }
            _ = try await store.save(batch)
            start = end
        }

        let context = store.mainContext
        let repeats = ctx.sizes.catalogRepeats
        var figures: [String: Double] = [:]
        let perSection = c.perSection

        let sections = try timed(repeats) {
            try context.aggregate(Query(entity: "Package"), groupedBy: .target(relationship: inSection.tag))
        }
        let countByID = Dictionary(uniqueKeysWithValues: sections.result.map { ($0.group, $0.count) })
        try check(sectionIDs.indices.allSatisfy { countByID[.string(sectionIDs[$0].description)] ?? 0 == perSection[$0] },
                  "strata packages per section")
        figures["W13_sections_ms"] = sections.ms

        let each = try timed(repeats) {
            try sectionIDs.map { try context.count(Query(entity: "Package", predicate: .related(relationship: inSection.tag, $0))) }
        }
        try check(each.result == perSection, "strata per-section counts")
        figures["W13_section_counts_ms"] = each.ms

        let dependsOn = try timed(repeats) {
            try context.count(Query(entity: "Package", predicate: .any(relationship: depends.tag,
                                                                       .compare(attribute: name.index, .equal, .string("pkg0")))))
        }
        try check(dependsOn.result == c.dependentsOfFirst, "strata dependents of pkg0: \(dependsOn.result) vs \(c.dependentsOfFirst)")
        figures["W13_depends_on_ms"] = dependsOn.ms

        // The ten most depended-on packages, with their names and counts.
        let top = try timed(repeats) { () -> [(String, Int)] in
            try context.fetch(Query(entity: "Package", sort: [SortKey(countOf: dependents.tag, ascending: false)], limit: 10))
                .map { r in
                    guard case .string(let n) = r["name"] else { return ("", 0) }
                    return (n, try context.relatedIDs(dependents, of: r.id).count)
                }
        }
        try check(top.result.map(\.1) == c.topDependedCounts, "strata top depended-on")
        figures["W13_top_depended_ms"] = top.ms

        let range = try timed(repeats) {
            try context.count(Query(entity: "Package", predicate: .between(
                attribute: size.index, .int(Int64(Catalog.sizeRange.lowerBound)), .int(Int64(Catalog.sizeRange.upperBound)))))
        }
        try check(range.result == c.sizeRangeCount, "strata size range")
        figures["W13_size_range_ms"] = range.ms

        let sums = try timed(max(1, repeats / 5)) {
            try context.aggregate(Query(entity: "Package"), groupedBy: .target(relationship: inSection.tag), [.sum(attribute: size.index)])
        }
        let sumByID = Dictionary(uniqueKeysWithValues: sums.result.map { ($0.group, $0.values[0]) })
        try check(sectionIDs.indices.allSatisfy { sumByID[.string(sectionIDs[$0].description)] == .int(Int64(c.sizeBySection[$0])) },
                  "strata size by section")
        figures["W13_size_by_section_ms"] = sums.ms
        return figures
    }

    // MARK: GRDB

    static let createSQL = """
        CREATE TABLE section(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
        CREATE TABLE maintainer(id INTEGER PRIMARY KEY, email TEXT NOT NULL UNIQUE, name TEXT NOT NULL);
        CREATE TABLE package(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, version TEXT NOT NULL,
                             installedSize INTEGER, section_id INTEGER REFERENCES section(id),
                             maintainer_id INTEGER REFERENCES maintainer(id));
        CREATE INDEX package_section ON package(section_id);
        CREATE INDEX package_maintainer ON package(maintainer_id);
        CREATE INDEX package_size ON package(installedSize);
        CREATE TABLE depends(package_id INTEGER NOT NULL, depends_id INTEGER NOT NULL,
                             PRIMARY KEY(package_id, depends_id)) WITHOUT ROWID;
        CREATE INDEX depends_reverse ON depends(depends_id, package_id);
        """

    static func grdb(_ ctx: WorkloadContext, _ c: Catalog) throws -> [String: Double] {
        let dir = try ctx.storeDirectory("W13", .grdb)
        defer { ctx.remove(dir) }
        let pool = try DatabasePool(path: dir.appendingPathComponent("db.sqlite").path, configuration: Configuration())
        try pool.write { db in
            try db.execute(sql: createSQL)
            let section = try db.makeStatement(sql: "INSERT INTO section(id, name) VALUES (?, ?)")
            for s in 0..<c.sections { try section.execute(arguments: [s + 1, "section\(s)"]) }
            let maintainer = try db.makeStatement(sql: "INSERT INTO maintainer(id, email, name) VALUES (?, ?, ?)")
            for m in 0..<c.maintainers { try maintainer.execute(arguments: [m + 1, "m\(m)@example.org", "Maintainer \(m)"]) }
        }
        var start = 0
        while start < c.packages {
            let end = min(c.packages, start + ctx.sizes.batchSize)
            try pool.write { db in
                let insert = try db.cachedStatement(sql: """
                    INSERT INTO package(id, name, version, installedSize, section_id, maintainer_id) VALUES (?, ?, ?, ?, ?, ?)
                    """)
                for p in start..<end {
                    try insert.execute(arguments: [p + 1, "pkg\(p)", "1.\(p % 10)", c.size[p], c.section[p] + 1, c.maintainer[p] + 1])
                }
            }
            start = end
        }
        start = 0
        while start < c.packages {
            let end = min(c.packages, start + ctx.sizes.batchSize)
            try pool.write { db in
                let link = try db.cachedStatement(sql: "INSERT INTO depends(package_id, depends_id) VALUES (?, ?)")
                for p in start..<end { for t in c.depends[p] { try link.execute(arguments: [p + 1, t + 1]) } }
            }
            start = end
        }
        try pool.write { db in try db.execute(sql: "ANALYZE") }

        let repeats = ctx.sizes.catalogRepeats
        var figures: [String: Double] = [:]
        let perSection = c.perSection
        try pool.read { db in
            let sections = try timed(repeats) {
                try Row.fetchAll(db.cachedStatement(sql: "SELECT section_id, COUNT(*) FROM package GROUP BY section_id"))
                    .reduce(into: [Int: Int]()) { $0[$1[0]] = $1[1] }
            }
            try check((0..<c.sections).allSatisfy { sections.result[$0 + 1] ?? 0 == perSection[$0] }, "grdb packages per section")
            figures["W13_sections_ms"] = sections.ms

            let each = try timed(repeats) {
                let count = try db.cachedStatement(sql: "SELECT COUNT(*) FROM package WHERE section_id = ?")
                return try (0..<c.sections).map { try Int.fetchOne(count, arguments: [$0 + 1]) ?? 0 }
            }
            try check(each.result == perSection, "grdb per-section counts")
            figures["W13_section_counts_ms"] = each.ms

            let dependsOn = try timed(repeats) {
                try Int.fetchOne(db.cachedStatement(sql: """
                    SELECT COUNT(*) FROM depends JOIN package ON package.id = depends.depends_id WHERE package.name = ?
                    """), arguments: ["pkg0"]) ?? 0
            }
            try check(dependsOn.result == c.dependentsOfFirst, "grdb dependents of pkg0")
            figures["W13_depends_on_ms"] = dependsOn.ms

            let top = try timed(repeats) {
                try Row.fetchAll(db.cachedStatement(sql: """
                    SELECT package.name, counted.n FROM
                      (SELECT depends_id, COUNT(*) AS n FROM depends GROUP BY depends_id ORDER BY n DESC, depends_id LIMIT 10) AS counted
                    JOIN package ON package.id = counted.depends_id ORDER BY counted.n DESC, package.id
                    """)).map { (row: Row) -> (String, Int) in (row[0], row[1]) }
            }
            try check(top.result.map(\.1) == c.topDependedCounts, "grdb top depended-on")
            figures["W13_top_depended_ms"] = top.ms

            let range = try timed(repeats) {
                try Int.fetchOne(db.cachedStatement(sql: "SELECT COUNT(*) FROM package WHERE installedSize BETWEEN ? AND ?"),
                                 arguments: [Catalog.sizeRange.lowerBound, Catalog.sizeRange.upperBound]) ?? 0
            }
            try check(range.result == c.sizeRangeCount, "grdb size range")
            figures["W13_size_range_ms"] = range.ms

            let sums = try timed(max(1, repeats / 5)) {
                try Row.fetchAll(db.cachedStatement(sql: "SELECT section_id, SUM(installedSize) FROM package GROUP BY section_id"))
                    .reduce(into: [Int: Int]()) { $0[$1[0]] = $1[1] }
            }
            try check((0..<c.sections).allSatisfy { sums.result[$0 + 1] == c.sizeBySection[$0] }, "grdb size by section")
            figures["W13_size_by_section_ms"] = sums.ms
        }
        return figures
    }
}
