import Foundation

extension Store {
    /// Opens a store and checks the given Swift entity types against its schema up front.
    public static func open(at url: URL, schema: Schema, entities: [any Entity.Type],
                            configuration: StoreConfiguration = StoreConfiguration()) throws -> Store {
        for type in entities { try schema.check(type) }
        return try open(at: url, schema: schema, configuration: configuration)
    }

    /// A temporary store (``temporary(schema:configuration:)``) whose schema is checked against
    /// the given Swift entity types first, as ``open(at:schema:entities:configuration:)`` does.
    public static func temporary(schema: Schema, entities: [any Entity.Type],
                                 configuration: StoreConfiguration = StoreConfiguration()) throws -> Store {
        for type in entities { try schema.check(type) }
        return try temporary(schema: schema, configuration: configuration)
    }
}
