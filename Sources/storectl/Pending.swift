import ArgumentParser
struct ImportCommand: AsyncParsableCommand { static let configuration = CommandConfiguration(commandName: "import", abstract: "Import NDJSON or CSV records.") }
struct ExportCommand: AsyncParsableCommand { static let configuration = CommandConfiguration(commandName: "export", abstract: "Export records.") }
struct QueryCommand: AsyncParsableCommand { static let configuration = CommandConfiguration(commandName: "query", abstract: "Query records.") }
