import ArgumentParser
import Foundation
import Strata

struct InfoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "info",
        abstract: "Show a store's schema, last transaction, object counts and sizes.",
        discussion: """
        Opens the store read-only; works while another process writes to it.

        Examples:
          storectl info ./library.strata
          storectl info ./library.strata --json | jq .entities

        JSON: {"path": "...", "schema": {"model": "library", "version": 1}, "format": 3, "lastTransaction": 42, \
        "entities": {"Album": 54, ...}, "objects": 406, "fileBytes": 1048576, "mapSizeBytes": 68719476736, \
        "logEntries": 42, "readers": 1}
        """
    )

    @OptionGroup var target: StoreArgument
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        let info: StoreInfo
        do {
            let store = try Store.openReadOnly(at: target.url, configuration: target.configuration)
            noteUnfinishedClusterInit(store)
            defer { store.close() }
            info = try store.info()
        } catch {
            throw failure(error)
        }
        let names = info.entities.keys.sorted()
        let total = info.entities.values.reduce(0, +)
        if json {
            printJSON(.object([
                ("path", .string(info.path)),
                ("schema", .object([("model", .string(info.model)), ("version", .int(Int64(info.schemaVersion)))])),
                ("format", .int(Int64(info.storeFormat))),
                ("lastTransaction", .int(Int64(info.lastTransaction.rawValue))),
                ("entities", .object(names.map { ($0, .int(Int64(info.entities[$0]!))) })),
                ("objects", .int(Int64(total))),
                ("fileBytes", .int(Int64(info.fileBytes))),
                ("mapSizeBytes", .int(Int64(info.mapSizeBytes))),
                ("logEntries", .int(Int64(info.logEntries))),
                ("readers", .int(Int64(info.readers))),
            ]))
            return
        }
        print("store:            \(EchoedText.escaped(info.path))")
        print("schema:           \(info.model) v\(info.schemaVersion)")
        print("""
            store format:     \(info.storeFormat)\(info.storeFormat < 2
                ? " (counts in meta, log entries plain; storectl compact --horizon 0 rewrites it in format 3)"
                : info.storeFormat < 3 ? " (log entries plain; storectl compact --horizon 0 rewrites it in format 3)" : "")
            """)
        print("last transaction: \(info.lastTransaction)")
        print("log entries:      \(info.logEntries)")
        print("file size:        \(formatBytes(info.fileBytes)) (map \(formatBytes(info.mapSizeBytes)))")
        print("objects:          \(total)")
        let width = names.map(\.count).max() ?? 0
        for n in names { print("  \(n.padding(toLength: width, withPad: " ", startingAt: 0))  \(info.entities[n]!)") }
    }
}

func formatBytes(_ n: Int) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"]
    var v = Double(n)
    var u = 0
    while v >= 1024 && u < units.count - 1 {
        v /= 1024
        u += 1
    }
    return u == 0 ? "\(n) B" : String(format: "%.1f %@", v, units[u])
}
