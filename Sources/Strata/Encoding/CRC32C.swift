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

extension CRC32C {
    /// The reflected Castagnoli polynomial.
    private static let polynomial: UInt32 = 0x82F6_3B78

    /// `a · b` modulo the polynomial, both as reflected polynomials over GF(2) (bit 31 is x⁰).
    static func multiplyModP(_ a: UInt32, _ b: UInt32) -> UInt32 {
        guard a != 0 else { return 0 }
        var m: UInt32 = 1 << 31, product: UInt32 = 0, b = b
        while true {
            if a & m != 0 {
                product ^= b
                if a & (m &- 1) == 0 { return product }
            }
            m >>= 1
            b = b & 1 != 0 ? (b >> 1) ^ polynomial : b >> 1
        }
    }

    /// x^(2^k) modulo the polynomial, for k in 0..<67 (every bit of a byte count, times 8). The
    /// powers do not repeat with period 32: the polynomial has the factor x + 1, so x^(2^32) is
    /// not x modulo it, and a table of 32 read modulo 32 gave wrong shifts from 512 MiB on.
    private static let powersOfX: [UInt32] = {
        var p: UInt32 = 1 << 30   // x¹
        var table = [p]
        for _ in 1..<(UInt.bitWidth + 3) {
            p = multiplyModP(p, p)
            table.append(p)
        }
        return table
    }()

    /// x^(8·bytes) modulo the polynomial: what appending `bytes` bytes to a message multiplies
    /// its CRC register by.
    static func shift(bytes: Int) -> UInt32 {
        precondition(bytes >= 0, "a length is never negative")
        var p: UInt32 = 1 << 31   // x⁰
        var n = UInt(bytes), k = 3   // 8 = 2³
        while n != 0 {
            if n & 1 != 0 { p = multiplyModP(powersOfX[k], p) }
            n >>= 1
            k += 1
        }
        return p
    }

    /// The CRC of `a ‖ b` from the CRC of `a` and that of `b`, given ``shift(bytes:)`` of `b`'s
    /// length: the CRC is linear over GF(2), so the prefix's part only needs moving past `b`.
    static func combine(_ crcA: UInt32, _ crcB: UInt32, shiftOfB: UInt32) -> UInt32 {
        multiplyModP(shiftOfB, crcA) ^ crcB
    }
}
