import ArgumentParser
import Foundation
import Strata

/// `--shared-with-group`, taken with the store's directory by every subcommand.
struct SharingFlag: ParsableArguments {
    @Flag(help: ArgumentHelp("The store is shared with the group of its directory: made with directories 0770 and " +
                             "files 0660 (init, and new generations), and opened although its group may write its " +
                             "directories. Without it a store is private (0700, 0600) and a group-writable one is " +
                             "refused."))
    var sharedWithGroup = false
}

/// The store directory argument of every subcommand that works on an existing store.
struct StoreArgument: ParsableArguments, StoreLocation {
    @Argument(help: ArgumentHelp("Store directory (made by storectl init, or by storectl cluster join).", valueName: "store"))
    var store: String
    @OptionGroup var sharing: SharingFlag

    func validate() throws { try refuseEmpty() }
}

/// The store directory argument of the subcommands that make a store (`init`, `cluster join`).
struct NewStoreArgument: ParsableArguments, StoreLocation {
    @Argument(help: ArgumentHelp("Directory of the new store.", valueName: "store"))
    var store: String
    @OptionGroup var sharing: SharingFlag

    func validate() throws { try refuseEmpty() }
}

/// A store's directory as a command line gives it, with the options every open of it takes.
protocol StoreLocation {
    var store: String { get }
    var sharing: SharingFlag { get }
}

extension StoreLocation {
    var sharedWithGroup: Bool { sharing.sharedWithGroup }

    /// An empty store argument is a usage error: as a path it named the current directory, so
    /// `storectl compact "$STORE"` with `STORE` unset compacted whatever store was there.
    func refuseEmpty() throws {
        if store.isEmpty {
            throw ValidationError("the store directory is empty (\"\"); give its path (\".\" for the current directory)")
        }
    }

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

/// An empty `--schema` (`init`, `generate`, `migrate`) is a usage error: as a path it named the
/// current directory.
func refuseEmptySchema(_ schema: String) throws {
    if schema.isEmpty { throw ValidationError("--schema is empty (\"\"); give the model directory") }
}
