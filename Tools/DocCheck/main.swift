// Checks that every public declaration of the Strata and StrataCluster libraries has a doc
// comment: each line of Sources/Strata and Sources/StrataCluster that declares something `public` or `open` (a type, function, initializer,
// property, subscript, type alias or associated type; extensions excluded, they document
// nothing themselves), and each case of a public enum, must follow a `///` comment or the end of a `/** … */` one,
// attributes in between allowed. Prints each undocumented declaration as `file:line: text` and
// exits 1 when there is one. Usage: swift Tools/DocCheck/main.swift <repository root>
import Foundation

let root = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : FileManager.default.currentDirectoryPath
let sourceDirectories = ["Sources/Strata", "Sources/StrataCluster"].map { URL(fileURLWithPath: root).appendingPathComponent($0) }

/// Words that may stand between `public` and the declaration's keyword.
let modifiers: Set<String> = ["static", "class", "final", "override", "mutating", "nonmutating", "convenience",
                              "required", "indirect", "lazy", "dynamic", "nonisolated", "borrowing", "consuming",
                              "private(set)", "fileprivate(set)", "internal(set)", "package(set)"]
let declarationKeywords: Set<String> = ["func", "var", "let", "init", "init?", "init!", "subscript", "struct", "class",
                                        "enum", "protocol", "typealias", "case", "actor", "associatedtype", "macro"]

/// Whether `line` (trimmed) declares something public or open.
func declaresPublic(_ line: String) -> Bool {
    var words = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
    // Leading attributes on the same line: `@inlinable public func …`.
    while let first = words.first, first.hasPrefix("@") { words.removeFirst() }
    guard let first = words.first, first == "public" || first == "open" else { return false }
    for word in words.dropFirst() {
        if modifiers.contains(word) || word == "public" || word == "open" { continue }
        let keyword = word.prefix { $0.isLetter || $0 == "?" || $0 == "!" }
        return declarationKeywords.contains(String(keyword)) || declarationKeywords.contains(word)
    }
    return false
}

var missing: [String] = []
var checked = 0
let files = sourceDirectories.flatMap { sources in
    FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?
        .compactMap { $0 as? URL }.filter { $0.pathExtension == "swift" }.sorted { $0.path < $1.path } ?? []
}
for file in files {
    guard let text = try? String(contentsOf: file, encoding: .utf8) else {
        missing.append("\(file.path): unreadable")
        continue
    }
    let lines = text.components(separatedBy: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
    // The enums being read, as (whether public, the brace depth of their body): a `case` line
    // at that depth declares a case, public when the enum is.
    var enums: [(isPublic: Bool, depth: Int)] = []
    var depth = 0
    for (i, line) in lines.enumerated() {
        let code = line.hasPrefix("//") ? "" : line
        let opens = code.filter { $0 == "{" }.count, closes = code.filter { $0 == "}" }.count
        defer {
            depth += opens - closes
            while let last = enums.last, depth < last.depth { enums.removeLast() }
        }
        let words = code.split(separator: " ").map(String.init).filter { !$0.hasPrefix("@") }
        if let k = words.firstIndex(of: "enum"), opens > closes, words[..<k].allSatisfy({ modifiers.contains($0) ||
            ["public", "internal", "private", "fileprivate", "package", "indirect"].contains($0) }) {
            enums.append((isPublic: words.first == "public", depth: depth + 1))
        }
        let isCase = code.hasPrefix("case ") && !code.hasSuffix(":") && enums.last?.depth == depth
            && enums.last?.isPublic == true && (code.dropFirst(5).first?.isLetter ?? false)
            && !code.hasPrefix("case let ") && !code.hasPrefix("case var ")
        guard isCase || declaresPublic(line) else { continue }
        checked += 1
        var j = i - 1
        // Attributes on lines of their own (`@available(…)`, `@discardableResult`).
        while j >= 0, lines[j].hasPrefix("@") { j -= 1 }
        let documented = j >= 0 && (lines[j].hasPrefix("///") || lines[j].hasSuffix("*/"))
        if !documented {
            let relative = file.path.replacingOccurrences(of: root + "/", with: "")
            missing.append("\(relative):\(i + 1): \(line)")
        }
    }
}
for m in missing { print(m) }
print("doc-check: \(checked) public declarations, \(missing.count) without a doc comment")
exit(missing.isEmpty ? 0 : 1)
