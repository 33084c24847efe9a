import FuzzSupport
@_spi(Fuzz) import Strata

/// The record decoder must never crash on any bytes: it returns a record or throws
/// `corruptRecord` naming the object. The input is the object id's 16 key bytes followed by a
/// record body without its checksum, decoded with the library schema (v2) as it is and sealed
/// with the right checksum. A record that decodes belongs to that id, has one value per
/// attribute of its entity, and survives encode → decode with the same bytes.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRecord(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    guard let id = FuzzEntryPoints.objectID(keyBytes: input) else { return 0 }
    let body = Array(input[16...])
    _ = decode(body, id: id)
    guard let record = decode(FuzzEntryPoints.sealRecord(body, id: id), id: id) else { return 0 }
    guard record.id == id, record.entity.tag == id.entityTag, record.values.count == record.entity.attributes.count else {
        fatalError("decoded record does not belong to \(id): \(record)")
    }
    let canonical = FuzzEntryPoints.encodeRecord(record)
    let again: Record
    do { again = try FuzzEntryPoints.decodeRecord(canonical, id: id, schema: FuzzSupport.schema) } catch {
        fatalError("the encoding of a decoded record does not decode: \(error)\n\(record)")
    }
    if FuzzEntryPoints.encodeRecord(again) != canonical || again.version != record.version || again.entity !== record.entity {
        fatalError("record round trip changed it:\n\(record)\n\(again)")
    }
    return 0
}

/// The record, nil for a `corruptRecord` of this id; any other error is a failure.
func decode(_ bytes: [UInt8], id: ObjectID) -> Record? {
    do { return try FuzzEntryPoints.decodeRecord(bytes, id: id, schema: FuzzSupport.schema) } catch StrataError.corruptRecord(let bad, _) where bad == id {
        return nil
    } catch {
        fatalError("the decoder threw something other than corruptRecord(\(id)): \(error)")
    }
}

/// The entry point SwiftPM links as `main`.
@_cdecl("fuzz_record_main")
public func fuzz_record_main(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv) { data, size in data.map { fuzzRecord($0, size) } ?? 0 }
}
