// The layer check: fails when a folder of Sources/Strata refers to a name declared in a folder of
// a higher layer, or when a target other than StrataLMDB imports CLMDB.
//
// Layers are listed bottom first in Tools/layers (one layer per line; folders on one line may
// refer to each other). A reference is a use of a type, protocol, type alias or top-level
// function declared at the top level of another folder, found by reading the sources as tokens
// (comments and string literals removed). It is a check of the plan, not a compiler: it reads
// names, so a local variable spelled like another folder's type would be reported (rename it).
//
//   swift Tools/LayerCheck/main.swift [repository root]
//
// Exit status 0: the plan holds; 1: references listed on standard error; 2: bad input.
import Foundation

struct Failure: Error { let message: String }

func readText(_ url: URL) throws -> String {
    do { return try String(contentsOf: url, encoding: .utf8) } catch {
        throw Failure(message: "cannot read \(url.path): \(error.localizedDescription)")
    }
}

/// Source text without comments and string literals (code only), lines kept.
func codeOnly(_ source: String) -> String {
    var out = String.UnicodeScalarView()
    let s = Array(source.unicodeScalars)
    var i = 0
    var blockDepth = 0
    func at(_ k: Int) -> Unicode.Scalar? { k < s.count ? s[k] : nil }
    while i < s.count {
        let c = s[i]
        if blockDepth > 0 {
            if c == "*", at(i + 1) == "/" { blockDepth -= 1; i += 2; continue }
            if c == "/", at(i + 1) == "*" { blockDepth += 1; i += 2; continue }
            if c == "\n" { out.append(c) }
            i += 1
            continue
        }
        if c == "/", at(i + 1) == "/" {
            while i < s.count, s[i] != "\n" { i += 1 }
            continue
        }
        if c == "/", at(i + 1) == "*" { blockDepth = 1; i += 2; continue }
        if c == "\"" {
            // Raw strings (#"…"#) are not used for code here; a multi-line literal ends at """.
            let multiline = at(i + 1) == "\"" && at(i + 2) == "\""
            i += multiline ? 3 : 1
            while i < s.count {
                if s[i] == "\\" { i += 2; continue }
                if multiline {
                    if s[i] == "\"", at(i + 1) == "\"", at(i + 2) == "\"" { i += 3; break }
                    if s[i] == "\n" { out.append("\n") }
                } else if s[i] == "\"" || s[i] == "\n" {
                    i += 1
                    break
                }
                i += 1
            }
            out.append(" ")
            continue
        }
        out.append(c)
        i += 1
    }
    return String(out)
}

func isIdentifierStart(_ c: Unicode.Scalar) -> Bool { c == "_" || (c.properties.isAlphabetic && c.isASCII) }
func isIdentifierPart(_ c: Unicode.Scalar) -> Bool { isIdentifierStart(c) || ("0"..."9").contains(c) }

/// Every identifier of `code`, with the line it is on.
func identifiers(_ code: String) -> [(String, Int)] {
    var result: [(String, Int)] = []
    var current = String.UnicodeScalarView()
    var line = 1
    for c in code.unicodeScalars {
        if isIdentifierPart(c), !current.isEmpty || isIdentifierStart(c) {
            current.append(c)
        } else if !current.isEmpty {
            result.append((String(current), line))
            current = String.UnicodeScalarView()
        }
        if c == "\n" { line += 1 }
    }
    if !current.isEmpty { result.append((String(current), line)) }
    return result
}

/// Names declared at the top level (column 0) of `code`: types, protocols, aliases, functions.
func topLevelDeclarations(_ code: String) -> [String] {
    let modifiers: Set<String> = ["public", "package", "internal", "fileprivate", "final", "indirect", "nonisolated", "open"]
    let kinds: Set<String> = ["struct", "class", "enum", "protocol", "typealias", "actor", "func"]
    var names: [String] = []
    for line in code.split(separator: "\n", omittingEmptySubsequences: true) {
        guard let first = line.unicodeScalars.first, isIdentifierStart(first) || first == "@" else { continue }
        var words = line.split(whereSeparator: { " \t(<:{=".unicodeScalars.contains($0.unicodeScalars.first!) }).map(String.init)
        while let w = words.first, w.hasPrefix("@") || modifiers.contains(w) { words.removeFirst() }
        if words.count >= 2, kinds.contains(words[0]) {
            if words[0] == "private" { continue }
            names.append(words[1])
        }
    }
    return names
}

func run() throws -> Int32 {
    let arguments = CommandLine.arguments.dropFirst()
    let root = URL(fileURLWithPath: arguments.first ?? FileManager.default.currentDirectoryPath)
    let sources = root.appendingPathComponent("Sources")
    let strata = sources.appendingPathComponent("Strata")
    let plan = try readText(root.appendingPathComponent("Tools/layers"))
    var layerOf: [String: Int] = [:]
    var layer = 0
    for rawLine in plan.split(separator: "\n") {
        let line = rawLine.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)[0]
        let folders = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        if folders.isEmpty { continue }
        for f in folders {
            guard layerOf[f] == nil else { throw Failure(message: "Tools/layers: \(f) is listed twice") }
            layerOf[f] = layer
        }
        layer += 1
    }

    let fm = FileManager.default
    var files: [(folder: String, path: String, code: String)] = []
    var problems: [String] = []
    guard let folders = try? fm.contentsOfDirectory(atPath: strata.path) else {
        throw Failure(message: "no directory \(strata.path)")
    }
    for folder in folders.sorted() {
        var isDirectory: ObjCBool = false
        guard fm.fileExists(atPath: strata.appendingPathComponent(folder).path, isDirectory: &isDirectory) else { continue }
        guard isDirectory.boolValue else {
            if folder.hasSuffix(".swift") { problems.append("Sources/Strata/\(folder): a source file outside every folder of Tools/layers") }
            continue
        }
        // A DocC catalog (Strata.docc) holds articles, not code.
        if folder.hasSuffix(".docc") { continue }
        guard layerOf[folder] != nil else {
            problems.append("Sources/Strata/\(folder): a folder that Tools/layers does not list")
            continue
        }
        let enumerator = fm.enumerator(atPath: strata.appendingPathComponent(folder).path)
        while let relative = enumerator?.nextObject() as? String {
            guard relative.hasSuffix(".swift") else { continue }
            let path = "Sources/Strata/\(folder)/\(relative)"
            files.append((folder, path, codeOnly(try readText(root.appendingPathComponent(path)))))
        }
    }

    var owner: [String: String] = [:]
    for f in files {
        for name in topLevelDeclarations(f.code) where owner[name] == nil { owner[name] = f.folder }
    }
    for f in files.sorted(by: { $0.path < $1.path }) {
        let here = layerOf[f.folder]!
        var reported = Set<String>()
        for (name, line) in identifiers(f.code) {
            guard let o = owner[name], o != f.folder, let there = layerOf[o], there > here, reported.insert(name).inserted else { continue }
            problems.append("\(f.path):\(line): \(f.folder) (layer \(here)) refers to \(name) of \(o) (layer \(there), above)")
        }
    }

    // CLMDB: imported by the StrataLMDB target alone.
    if let enumerator = fm.enumerator(atPath: sources.path) {
        while let relative = enumerator.nextObject() as? String {
            guard relative.hasSuffix(".swift"), !relative.hasPrefix("StrataLMDB/") else { continue }
            let code = codeOnly(try readText(sources.appendingPathComponent(relative)))
            for (n, line) in code.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
            where line.trimmingCharacters(in: .whitespaces).range(of: #"^(@[A-Za-z_]+(\([^)]*\))?\s+)*import\s+(struct\s+|enum\s+|func\s+)?CLMDB\b"#, options: .regularExpression) != nil {
                problems.append("Sources/\(relative):\(n + 1): imports CLMDB (only StrataLMDB may)")
            }
        }
    }

    if problems.isEmpty {
        print("layer check: \(files.count) files in \(Set(files.map(\.folder)).count) folders follow Tools/layers; CLMDB is imported by StrataLMDB alone")
        return 0
    }
    for p in problems { FileHandle.standardError.write(Data((p + "\n").utf8)) }
    FileHandle.standardError.write(Data("layer check: \(problems.count) problem(s)\n".utf8))
    return 1
}

do {
    exit(try run())
} catch let f as Failure {
    FileHandle.standardError.write(Data("layer check: \(f.message)\n".utf8))
    exit(2)
}
