/// Where an import's pass reads its records from, one after another (``PipelinedRecords``, or the
/// records an earlier pass kept, ``KeptRecords``).
protocol RecordSource: AnyObject {
    /// The next item; nil at the end of the input.
    func next() throws -> RecordIterator.Item?
    /// Bytes of the input behind the items handed out so far.
    var bytesRead: Int { get }
    /// Called once the consumer is done, also when it stops early.
    func close()
}

extension PipelinedRecords: RecordSource {}

/// The records the validation pass of a small import read, in input order, handed out again to
/// its write pass (see ``ImportOptions/keptRecordsMaxInputBytes``): the same items, results and
/// locations as reading the input again would give, without reading or parsing it.
final class KeptRecords: RecordSource {
    private var items: [RecordIterator.Item]
    private var position = 0
    private let totalBytes: Int

    /// `items`, which were read from `bytes` bytes of input.
    init(_ items: [RecordIterator.Item], bytes: Int) {
        self.items = items
        self.totalBytes = bytes
    }

    func next() throws -> RecordIterator.Item? {
        guard position < items.count else { return nil }
        defer { position += 1 }
        return items[position]
    }

    /// In proportion to the items handed out (their lines' lengths are not kept).
    var bytesRead: Int {
        items.isEmpty ? totalBytes : Int((Double(position) / Double(items.count) * Double(totalBytes)).rounded())
    }

    func close() { items = [] }
}
