import Foundation

/// Runs `body` on a thread of its own, started now, and returns a group that `body`'s end
/// leaves: for the second side of a piece of work whose caller blocks until both sides are done
/// (migration, `verify`, a bulk load's generation). Not on a dispatch queue: the global queues'
/// threads are the ones Swift's tasks run on too, and a caller blocking one of them — with its
/// callers possibly blocking the others — would wait for a thread that only its own end frees.
func startOnOwnThread(name: String, _ body: @escaping @Sendable () -> Void) -> DispatchGroup {
    let done = DispatchGroup()
    done.enter()
    let thread = Thread {
        body()
        done.leave()
    }
    thread.name = name
    thread.start()
    return done
}
