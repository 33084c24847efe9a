#ifndef STRATA_POSIX_H
#define STRATA_POSIX_H

/// Renames `from` to `to` only when nothing is at `to`: 0, or -1 with `errno` set (`EEXIST` when
/// `to` exists, whatever it is: a file, an empty directory, a link). Linux's
/// `renameat2(RENAME_NOREPLACE)` makes the check and the rename one step; on a file system that
/// does not support the flag (`EINVAL`) or a kernel without the call (`ENOSYS`), `to` is looked up
/// with `lstat` first and a plain `rename` follows, so a path made between the two can still be
/// replaced there.
int strata_rename_noreplace(const char *from, const char *to);

#endif
