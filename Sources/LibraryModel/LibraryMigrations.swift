import Strata

/// The custom migration steps of the library model, by the names its schema files use.
///
/// `deriveSortName` (v2): an artist without a sort name gets one from its name, with a leading
/// article moved to the end ("The Velvet Choir" → "Velvet Choir, The").
public let libraryMigrations: MigrationRegistry = {
    var registry = MigrationRegistry()
    registry.register("deriveSortName") { record in
        guard record["sortName"].isNull, case .string(let name) = record["name"] else { return }
        for article in ["The ", "A ", "An "] where name.hasPrefix(article) && name.count > article.count {
            record["sortName"] =
                .string(String(name.dropFirst(article.count)) + ", " + article.trimmingCharacters(in: .whitespaces))
            return
        }
        record["sortName"] = .string(name)
    }
    return registry
}()

import Foundation
