import ArgumentParser
import Foundation

/// The store directory argument shared by every subcommand.
struct StoreArgument: ParsableArguments {
    @Argument(help: ArgumentHelp("Store directory (created by storectl init).", valueName: "store"))
    var store: String

    var url: URL { URL(fileURLWithPath: store) }
}
