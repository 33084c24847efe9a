
/// Lets one compaction or migration of a store run at a time in this process; the next waits for
/// its turn (first come, first served) without holding a thread.
///
/// Both build a new generation from the live one and switch to it on the writer's queue. Two at
/// once could each switch: a compaction whose switch was queued behind a migration's would put
/// back a compacted copy of the old, unmigrated generation (the migration lost); a migration
/// after a compaction's switch would have built from the generation just retired, without the
/// saves committed since. Run one after the other, the second sees what the first did: after a
/// migration the old instance refuses with ``StrataError/migrated(path:toVersion:)``; after a
/// compaction a migration starts from the compacted generation.
typealias MaintenanceGate = SerialGate
