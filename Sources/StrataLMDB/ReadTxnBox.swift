import Foundation

/// A pooled, reset read transaction handle. Only ever used by one owner at a time (taken out of
/// the pool under its mutex), which is what makes sending it between threads safe.
package struct ReadTxnBox: @unchecked Sendable {
    package let txn: OpaquePointer
}
