import CStrataCRC

/// CRC-32C (Castagnoli): the SSE4.2 `crc32` instruction when the CPU has it, else slicing-by-8
/// tables (the same values; a test checks both against known vectors). Every log entry and
/// state record ends with one, so a flipped byte is reported as corruption instead of being
/// read as a wrong value.
enum CRC32C {
    /// Whether the hardware instruction is used (decided once).
    static let hardware = strata_crc32c_hardware_available() == 1

    private static let tables: [[UInt32]] = {
        var tables = Array(repeating: Array(repeating: UInt32(0), count: 256), count: 8)
        for i in 0..<256 {
            var crc = UInt32(i)
            for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
            tables[0][i] = crc
        }
        for i in 0..<256 {
            for t in 1..<8 { tables[t][i] = (tables[t - 1][i] >> 8) ^ tables[0][Int(tables[t - 1][i] & 0xff)] }
        }
        return tables
    }()

    private static let flat: [UInt32] = tables.flatMap { $0 }

    static func checksum(_ data: UnsafeRawBufferPointer) -> UInt32 {
        ~update(0xFFFF_FFFF, data)
    }

    /// Continues a running CRC (start at `0xFFFF_FFFF`, invert at the end) over `data`.
    static func update(_ running: UInt32, _ data: UnsafeRawBufferPointer) -> UInt32 {
        if hardware {
            guard let base = data.baseAddress, data.count > 0 else { return running }
            return strata_crc32c_hardware(running, base, data.count)
        }
        return updateWithTables(running, data)
    }

    /// The table-driven ``update(_:_:)`` (used without SSE4.2; public to tests for comparison).
    static func updateWithTables(_ running: UInt32, _ data: UnsafeRawBufferPointer) -> UInt32 {
        var crc = running
        var i = 0
        let n = data.count
        flat.withUnsafeBufferPointer { t in
            while n - i >= 8 {
                let lo = (UInt32(data[i]) | UInt32(data[i + 1]) << 8 | UInt32(data[i + 2]) << 16
                          | UInt32(data[i + 3]) << 24) ^ crc
                crc = t[7 * 256 + Int(lo & 0xff)] ^ t[6 * 256 + Int((lo >> 8) & 0xff)]
                    ^ t[5 * 256 + Int((lo >> 16) & 0xff)] ^ t[4 * 256 + Int(lo >> 24)]
                    ^ t[3 * 256 + Int(data[i + 4])] ^ t[2 * 256 + Int(data[i + 5])]
                    ^ t[1 * 256 + Int(data[i + 6])] ^ t[Int(data[i + 7])]
                i += 8
            }
            while i < n {
                crc = t[Int((crc ^ UInt32(data[i])) & 0xff)] ^ (crc >> 8)
                i += 1
            }
        }
        return crc
    }

    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0) }
    }
}
