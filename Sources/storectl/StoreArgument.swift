import ArgumentParser
import Foundation
import Strata

/// The store directory argument shared by every subcommand.
struct StoreArgument: ParsableArguments {
    @Argument(help: ArgumentHelp("Store directory (made by storectl init, or by storectl cluster join).", valueName: "store"))
    var store: String
    @Flag(help: ArgumentHelp("The store is shared with the group of its directory: made with directories 0770 and " +
                             "files 0660 (init, and new generations), and opened although its group may write its " +
                             "directories. Without it a store is private (0700, 0600) and a group-writable one is " +
                             "refused."))
    var sharedWithGroup = false

    var url: URL { URL(fileURLWithPath: store) }

    /// The options every open of the store takes from the command line.
    var configuration: StoreConfiguration {
        var c = StoreConfiguration()
        c.sharedWithGroup = sharedWithGroup
        // liblmdb trusts its pages: every page is checked before a command reads the store, so
        // a damaged one is refused (exit 65, naming the database and page), never a crash.
        c.checkPagesOnOpen = true
        // A store checked before and unchanged since (no commit by anyone) is not walked again.
        c.checkedPagesMemo = Self.pageCheckMemo
        return c
    }

    /// `$XDG_CACHE_HOME/strata/page-checks`, else `~/.cache/strata/page-checks`; nil without either.
    static var pageCheckMemo: URL? {
        let environment = ProcessInfo.processInfo.environment
        if let cache = environment["XDG_CACHE_HOME"], cache.hasPrefix("/") {
            return URL(fileURLWithPath: cache).appendingPathComponent("strata/page-checks")
        }
        guard let home = environment["HOME"], home.hasPrefix("/") else { return nil }
        return URL(fileURLWithPath: home).appendingPathComponent(".cache/strata/page-checks")
    }
}
