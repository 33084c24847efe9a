import Foundation

/// Where a record is in an import's input: its file, the line it starts on, and, for an object of
/// a JSON array, its place in the array (several objects may start on one line, and a key of file
/// and line alone gave them all one place: a record rejected among them took the others with it).
/// Ordered as the input is.
struct RecordLocation: Hashable, Comparable, Sendable {
    let fileIndex: Int32
    let element: UInt32
    let line: Int

    /// Before every record of the input.
    static let start = RecordLocation(fileIndex: -1, element: 0, line: 0)
    /// The most input files of one import (``Importer/run(files:)`` refuses more).
    static let maxFiles = Int(Int32.max)
    /// The most objects of one JSON array (``RecordIterator`` ends a file past it): 16 bytes of
    /// a location a record, as two numbers of 32 bits and a line.
    static let maxElements = Int(UInt32.max)

    static func < (a: RecordLocation, b: RecordLocation) -> Bool {
        (a.fileIndex, a.line, a.element) < (b.fileIndex, b.line, b.element)
    }
}

/// Streams the records of several input files (NDJSON or CSV), one at a time, with the raw
/// line for reject files and a location for messages. Memory: one read buffer and one record.
struct RecordIterator {
    struct Item {
        let result: Result<ImportRecord, ImportIssue>
        var raw: [UInt8]
        let fileIndex: Int
        let line: Int
        /// For a record that failed its checks, the keys it names its object by, as far as they
        /// could be read (``RecordBuilder/keysOfRejected(json:)``): a reference to one of them
        /// names a rejected record.
        var keysOfRejected: [ObjectReference] = []
        /// For an object of a JSON array, its place in the array (0 for a record of a line): several
        /// objects may start on one line (`[{…},{…}]` on one line).
        var element = 0
        /// Where the record is, a key for sets of records: unique per record, in input order.
        var location: RecordLocation {
            // Both within their limits (``RecordLocation/maxFiles``, ``RecordLocation/maxElements``),
            // which the importer and the iterator enforce.
            RecordLocation(fileIndex: Int32(fileIndex), element: UInt32(element), line: line)
        }

        /// The file index and line of `location`.
        static func unpacked(_ location: RecordLocation) -> (fileIndex: Int, line: Int) {
            (Int(location.fileIndex), location.line)
        }
    }

    let files: [String]
    let schema: Schema
    let options: ImportOptions
    let maxValueBytes: Int
    private var fileIndex = -1
    /// Objects of the JSON array being read so far (``Item/element``).
    private var arrayElements = 0
    private var reader: LineReader?
    /// Instead of `reader`, for an NDJSON-format file whose top level is an array of objects.
    private var arrayReader: JSONArrayReader?
    private var format: ImportFormat = .ndjson
    private var builder: RecordBuilder?
    private var csvColumns: [RecordBuilder.Column]?
    private var csvEntity: EntityDescription?
    private var finishedBytes = 0
    /// Each file as the import found it when it started (``InputFile/Identity``), or none: a
    /// file is read only while it is that version, and no further than its size then.
    let expected: [InputFile.Identity]?

    init(files: [String], schema: Schema, options: ImportOptions, maxValueBytes: Int,
         expected: [InputFile.Identity]? = nil) {
        precondition(expected == nil || expected?.count == files.count, "one identity for each input")
        self.files = files
        self.schema = schema
        self.options = options
        self.maxValueBytes = maxValueBytes
        self.expected = expected
    }

    /// Throws when the file being read is no longer the version the import started with
    /// (``expected``); `when` says where.
    private func checkUnchanged(_ when: String) throws {
        guard let want = expected?[fileIndex] else { return }
        let now: InputFile.Identity
        if let reader { now = try reader.identity() } else if let arrayReader { now = try arrayReader.identity() } else { return }
        if now != want { throw InputFile.changed(files[fileIndex], from: want, to: now, when) }
    }

    var bytesRead: Int { finishedBytes + (reader?.bytesRead ?? arrayReader?.bytesRead ?? 0) }

    /// Closes the current file (when iteration stops early).
    mutating func close() {
        reader?.close()
        reader = nil
        arrayReader?.close()
        arrayReader = nil
    }

    /// The next record or issue; nil when every file is done. Throws only for an unreadable file
    /// (or one that changed: ``expected``), and then again at every later call: nothing after it
    /// is read.
    mutating func next() throws -> Item? {
        if let failure { throw failure }
        do {
            return try nextItem()
        } catch {
            failure = error
            throw error
        }
    }

    /// The error ``next()`` threw, which ends the iteration.
    private var failure: Error?

    private mutating func nextItem() throws -> Item? {
        while true {
            if reader == nil && arrayReader == nil {
                fileIndex += 1
                guard fileIndex < files.count else { return nil }
                try openFile()
            }
            let path = files[fileIndex]
            if arrayReader != nil {
                guard let element = try arrayReader!.next() else {
                    arrayElements = 0
                    try checkUnchanged("while it was being read")
                    finishedBytes += arrayReader!.bytesRead
                    arrayReader!.close()
                    arrayReader = nil
                    continue
                }
                arrayElements += 1
                guard arrayElements <= RecordLocation.maxElements else {
                    var issue = ImportIssue(file: path, line: element.line, field: nil, reason: """
                        an array of more than \(RecordLocation.maxElements) objects: split it into several files
                        """)
                    issue.endsTheFile = true
                    finishedBytes += arrayReader!.bytesRead
                    arrayReader!.close()
                    arrayReader = nil
                    arrayElements = 0
                    return Item(result: .failure(issue), raw: [], fileIndex: fileIndex, line: element.line)
                }
                switch element {
                case .object(let bytes, let line):
                    if var item = try record(bytes, line: line) {
                        item.element = arrayElements
                        // One line in a rejects file, as a record of NDJSON is.
                        if item.raw.contains(where: { $0 == 0x0A || $0 == 0x0D }) {
                            item.raw = item.raw.map { $0 == 0x0A || $0 == 0x0D ? 0x20 : $0 }
                        }
                        return item
                    }
                case .tooLong(let bytes, let line):
                    var item = Item(result: .failure(ImportIssue(file: path, line: line, field: nil,
                                                                 reason: "object of \(bytes) bytes exceeds the " +
                                                                         "\(options.maxLineBytes)-byte limit")),
                                    raw: [], fileIndex: fileIndex, line: line)
                    item.element = arrayElements
                    return item
                case .malformed(let reason, let line):
                    var issue = ImportIssue(file: path, line: line, field: nil, reason: reason)
                    issue.endsTheFile = true
                    var item = Item(result: .failure(issue), raw: [], fileIndex: fileIndex, line: line)
                    item.element = arrayElements
                    return item
                }
                continue
            }
            guard let line = try reader!.next() else {
                try checkUnchanged("while it was being read")
                finishedBytes += reader!.bytesRead
                reader!.close()
                reader = nil
                // A file of no records (empty, `[]`, a CSV header alone: the export of an entity
                // without objects) adds nothing.
                continue
            }
            let number = reader!.lineNumber
            switch line {
            case .tooLong(let bytes, let quotes):
                var reason = "line of \(bytes) bytes exceeds the \(options.maxLineBytes)-byte limit"
                // A CSV file's header: the file cannot be read without it.
                if format == .csv && csvColumns == nil {
                    throw Self.header(ImportIssue(file: path, line: number, field: nil, reason: reason))
                }
                // A CSV line that leaves a quoted field open: the lines up to its closing quote are
                // the rest of this bad record, not records (they were read as records, text from
                // inside a field imported as values).
                if format == .csv && !quotes.isMultiple(of: 2) {
                    try skipRestOfQuotedField(quotes: quotes)
                    reason += " (a quoted field that goes on over the next lines, skipped with it)"
                }
                return Item(result: .failure(ImportIssue(file: path, line: number, field: nil, reason: reason)),
                            raw: [], fileIndex: fileIndex, line: number)
            case .text(let bytes):
                // A blank NDJSON line holds no record; a CSV row of spaces is a record (its one
                // field holds them: spaces in values are kept), only an empty row is skipped.
                if format == .csv ? bytes.isEmpty : bytes.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
                // An NDJSON line starting with `#` is a comment (no JSON text starts so): a rejects
                // file's `# FILE:LINE: reason` lines, so that the file imports again once fixed.
                if format == .ndjson, bytes.first(where: { $0 != 0x20 && $0 != 0x09 }) == UInt8(ascii: "#") { continue }
                if let item = try record(bytes, line: number) { return item }
            }
        }
    }

    private mutating func openFile() throws {
        let path = files[fileIndex]
        guard let f = options.format ?? ImportFormat.guess(path) else {
            throw ImportIssue(file: path, line: 0, field: nil,
                              reason: "unknown format (use a .ndjson or .csv name, or --format)")
        }
        format = f
        builder = RecordBuilder(schema: schema, file: path, maxValueBytes: maxValueBytes)
        csvColumns = nil
        csvEntity = nil
        if f == .csv {
            let name = options.csvEntity ?? ((path as NSString).lastPathComponent as NSString).deletingPathExtension
            guard let e = schema.entity(named: name) else {
                let known = "known: \(schema.entities.map(\.name).joined(separator: ", "))"
                throw ImportIssue(file: path, line: 0, field: nil, reason: options.csvEntity != nil
                    ? "the CSV entity given ('\(EchoedText.shown(name))', --entity) is not in the schema (\(known))"
                    : "the CSV entity '\(EchoedText.shown(name))', the file's name, is not in the schema (\(known)): " +
                      "name the file after its entity (Track.csv), or give the entity with --entity")
            }
            csvEntity = e
        }
        if f == .ndjson, JSONArrayReader.holdsArray(path) {
            arrayReader = try JSONArrayReader(path: path, maxObjectBytes: options.maxLineBytes)
        } else {
            reader = try LineReader(path: path, maxLineBytes: options.maxLineBytes)
        }
        try checkUnchanged("after the import started")
        reader?.expected = expected?[fileIndex]
        arrayReader?.expected = expected?[fileIndex]
    }

    /// Reads on, holding nothing, while a CSV record's quoted field is open: `quotes` is the count
    /// of `"` characters read of the record so far (odd while a field is open; a doubled quote
    /// inside a field counts twice). Ends after the line that closes it, or at the end of the file.
    private mutating func skipRestOfQuotedField(quotes: Int) throws {
        var quotes = quotes
        while !quotes.isMultiple(of: 2) {
            switch try reader!.next() {
            case .text(let skipped)?: quotes += LineReader.quotes(skipped)
            case .tooLong(_, let q)?: quotes += q
            case nil: return
            }
        }
    }

    /// A CSV record that cannot be split into fields: rejected, or, when it is the file's header
    /// (no header read yet), the end of the import, as any problem with the header is (the
    /// next line was taken for the header).
    private mutating func unsplit(_ issue: ImportIssue, raw: [UInt8], line: Int) throws -> Item {
        if csvColumns == nil { throw Self.header(issue) }
        return Item(result: .failure(issue), raw: raw, fileIndex: fileIndex, line: line)
    }

    /// `issue`, a problem with a CSV file's header, marked as ending the file
    /// (``ImportIssue/endsTheFile``).
    private static func header(_ issue: ImportIssue) -> ImportIssue {
        var issue = issue
        issue.endsTheFile = true
        return issue
    }

    private mutating func record(_ bytes: [UInt8], line: Int) throws -> Item? {
        let builder = builder!
        switch format {
        case .ndjson:
            do {
                return Item(result: .success(try builder.fromJSON(bytes, line: line)), raw: bytes, fileIndex: fileIndex,
                            line: line)
            } catch let issue as ImportIssue {
                return Item(result: .failure(issue), raw: bytes, fileIndex: fileIndex, line: line,
                            keysOfRejected: builder.keysOfRejected(json: bytes))
            }
        case .csv:
            var raw = bytes
            var fields: [CSVSplitter.Field]
            // A quoted field continued on the next line keeps the line break it had (CRLF or LF).
            var endsWithCR = reader?.lastLineEndedWithCR ?? false
            while true {
                do {
                    switch try CSVSplitter.split(raw) {
                    case .fields(let f): fields = f
                    case .needsMore:
                        // Lines are added while a quoted field stays open at their end (each
                        // line scanned once, ``CSVSplitter/quoteStaysOpen(continuing:)``), and
                        // the record split again only then, so a record of many lines costs its
                        // length, not its length squared. The whole record is held to
                        // `maxLineBytes`, as one line is. Past it, the rest of the field is
                        // skipped by counting quote characters (a doubled quote counts twice).
                        var quotes = LineReader.quotes(raw)
                        var open = true
                        repeat {
                            guard let next = try reader!.next() else {
                                return try unsplit(builder.issue(line, nil, "unterminated quoted field"), raw: raw,
                                                   line: line)
                            }
                            guard case .text(let more) = next,
                                  raw.count + (endsWithCR ? 2 : 1) + more.count <= options.maxLineBytes else {
                                // The rest of the open field is part of this bad record, not
                                // records of its own: skipped (counting quotes, not held) until
                                // the quote closes or the file ends.
                                switch next {
                                case .text(let more): quotes += LineReader.quotes(more)
                                case .tooLong(_, let q): quotes += q
                                }
                                try skipRestOfQuotedField(quotes: quotes)
                                let reason = "a record of more than \(options.maxLineBytes) bytes (a quoted field " +
                                             "running over several lines; is a closing quote missing?)"
                                return try unsplit(builder.issue(line, nil, reason), raw: [], line: line)
                            }
                            raw += (endsWithCR ? [0x0D, 0x0A] : [0x0A]) + more
                            endsWithCR = reader!.lastLineEndedWithCR
                            quotes += LineReader.quotes(more)
                            open = CSVSplitter.quoteStaysOpen(continuing: more)
                        } while open
                        continue
                    }
                } catch let e as CSVSplitter.CSVError {
                    return try unsplit(builder.issue(line, nil, e.reason), raw: raw, line: line)
                }
                break
            }
            guard let columns = csvColumns else {
                do {
                    csvColumns = try builder.csvColumns(fields, entity: csvEntity!, line: line)
                } catch let issue as ImportIssue {
                    throw Self.header(issue)
                }
                return nil
            }
            do {
                return Item(
                    result: .success(try builder.fromCSV(fields, columns: columns, entity: csvEntity!, line: line)),
                    raw: raw, fileIndex: fileIndex, line: line)
            } catch let issue as ImportIssue {
                return Item(result: .failure(issue), raw: raw, fileIndex: fileIndex, line: line,
                            keysOfRejected: builder.keysOfRejected(csv: fields, columns: columns, entity: csvEntity!))
            }
        }
    }
}
