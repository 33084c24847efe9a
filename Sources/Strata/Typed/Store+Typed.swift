import Foundation

extension Store {
    /// Opens a store and checks the given Swift entity types against its schema up front.
    public static func open(at url: URL, schema: Schema, entities: [any Entity.Type],
                            configuration: StoreConfiguration = StoreConfiguration()) throws -> Store {
        for type in entities { try schema.check(type) }
        return try open(at: url, schema: schema, configuration: configuration)
    }
}
