/// How one result list differs from the previous one.
public struct ResultsDiff: Sendable, Equatable {
    /// A record that kept its identity but changed position.
    public struct Move: Sendable, Equatable {
        /// The record's position in the old results.
        public let from: Int
        /// The record's position in the new results.
        public let to: Int
        /// A move from position `from` of the old results to position `to` of the new ones.
        public init(from: Int, to: Int) {
            self.from = from
            self.to = to
        }
    }
    /// Positions in the new results of records that were not there before.
    public var inserted: [Int] = []
    /// Positions in the old results of records that are gone.
    public var removed: [Int] = []
    /// Records present in both whose relative order changed (a minimal set: the rest keep their order).
    public var moved: [Move] = []
    /// Positions in the new results of records present before whose values changed.
    public var updated: [Int] = []

    /// Whether nothing was inserted, removed, moved or updated.
    public var isEmpty: Bool { inserted.isEmpty && removed.isEmpty && moved.isEmpty && updated.isEmpty }

    /// The diff from `old` to `new` (records matched by id).
    /// - Complexity: O(n log n).
    public static func between(_ old: [Record], _ new: [Record]) -> ResultsDiff {
        var diff = ResultsDiff()
        let oldIndex = Dictionary(old.enumerated().map { ($1.id, $0) }, uniquingKeysWith: { a, _ in a })
        let newIndex = Dictionary(new.enumerated().map { ($1.id, $0) }, uniquingKeysWith: { a, _ in a })
        diff.removed = old.indices.filter { newIndex[old[$0].id] == nil }
        var common: [(old: Int, new: Int)] = []
        for (i, r) in new.enumerated() {
            guard let o = oldIndex[r.id] else {
                diff.inserted.append(i)
                continue
            }
            common.append((o, i))
            if old[o] != r { diff.updated.append(i) }
        }
        // Records outside the longest increasing run of old positions are the ones that moved.
        let keep = longestIncreasing(common.map(\.old))
        for (k, pair) in common.enumerated() where !keep.contains(k) {
            diff.moved.append(Move(from: pair.old, to: pair.new))
        }
        return diff
    }

    private static func longestIncreasing(_ a: [Int]) -> Set<Int> {
        var tails: [Int] = []
        var tailIndex: [Int] = []
        var previous = [Int](repeating: -1, count: a.count)
        for (i, x) in a.enumerated() {
            var lo = 0, hi = tails.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if tails[mid] < x { lo = mid + 1 } else { hi = mid }
            }
            if lo > 0 { previous[i] = tailIndex[lo - 1] }
            if lo == tails.count {
                tails.append(x)
                tailIndex.append(i)
            } else {
                tails[lo] = x
                tailIndex[lo] = i
            }
        }
        var result = Set<Int>()
        var k = tailIndex.last ?? -1
        while k >= 0 {
            result.insert(k)
            k = previous[k]
        }
        return result
    }
}
