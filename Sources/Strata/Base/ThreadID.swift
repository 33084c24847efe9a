import Foundation

/// The calling thread's id (`pthread_self()`, never 0), as ``Writer`` records the thread
/// running a block of its queue.
func currentThreadID() -> UInt { UInt(pthread_self()) }
