import Glibc

/// UTF-8 bytes to a `String`, refusing invalid input, without the generic
/// `String(validating:as:)` (unspecialized across modules, it looked its generic metadata up in
/// the runtime's cache on every call: 12 % of a point read).
enum UTF8Text {
    /// The string whose UTF-8 is exactly `bytes`, or nil when they are not valid UTF-8.
    /// Decoding repairs invalid sequences (with U+FFFD); a repaired string's UTF-8 differs from
    /// the input, which is what gives invalid input away.
    static func string(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
        var s = String(decoding: bytes, as: UTF8.self)
        let exact = s.withUTF8 { u in
            u.count == bytes.count && (u.isEmpty || memcmp(u.baseAddress!, bytes.baseAddress!, u.count) == 0)
        }
        return exact ? s : nil
    }

    static func string(_ bytes: [UInt8]) -> String? {
        bytes.withUnsafeBufferPointer { string($0) }
    }
}
