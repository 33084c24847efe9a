extension Store {
    /// The store as it was right after transaction `tx` (``TransactionID/zero``: empty).
    /// - Throws: ``StrataError/noSuchTransaction(_:)`` for a transaction after the head.
    public func snapshot(asOf tx: TransactionID) throws -> AsOfContext {
        try checkUsable()
        return try AsOfContext(store: self, transactionID: tx)
    }
}
