/*  sandboxd/path.h: resolve a request path beneath the home, safely.

    Every fs.* channel and exec's cwd name paths relative to the home
    (/home/agent). Nothing outside the home may ever be read or written,
    even while the agent races us by swapping directories for symlinks.

    How: the path is first checked as a string against the one grammar
    of home paths (common/homepath.h, the API's too), then
    walked one component at a time from an fd on the home with
    openat(O_NOFOLLOW|O_DIRECTORY). A component that turns out to be a
    symlink is read with readlinkat and its target spliced into the walk
    in user space: an absolute target, or a ".." that would climb above
    the home, is refused with EACCES. ".." inside a symlink target pops
    our own stack of directory fds; we never openat(".."), so a renamed
    directory cannot lead us out. Because every step is an openat on an
    fd we hold, with O_NOFOLLOW, a symlink swapped in mid-walk is seen as
    ELOOP at that step and handled like any other symlink: the kernel
    never follows a link on our behalf. The walk is the same on every
    kernel (no openat2 dependency), which also keeps the fuzzer honest.

    Errors are negative errno values with a static message:
      -EINVAL  empty, a NUL or control byte, too long, a component over
               NAME_MAX, an empty ('//', trailing '/') or '.' component
      -EACCES  absolute path, "..", a symlink leading outside the home
      -ELOOP   more than AH_PATH_MAX_LINKS symlinks
      -ENOENT, -ENOTDIR, ... from the file system                     */
#ifndef AH_SANDBOXD_PATH_H
#define AH_SANDBOXD_PATH_H

#include <stddef.h>
#include <limits.h>

#define AH_PATH_MAX        4096     //  longest symlink target read (a request
                                    //  path: AH_HOMEPATH_MAX, common/homepath.h)
#define AH_PATH_MAX_DEPTH  256      //  deepest directory nesting walked
#define AH_PATH_MAX_LINKS  40       //  symlinks followed per resolution

//  Open path (len bytes, checked by ah_homepath_check with "." the home)
//  beneath home_fd. flags are openat flags for the final
//  component (O_NOFOLLOW and O_CLOEXEC are added); symlinks inside the
//  home are followed, at most AH_PATH_MAX_LINKS. Returns the fd or a
//  negative errno with *err.
int ah_path_open (int home_fd, const char *path, size_t len, int flags, const char **err);

//  Open the directory that holds path's last component and copy that
//  component into leaf (not followed even if it is a symlink: used to
//  create, rename onto, remove). The last component must not be "." (the
//  home itself cannot be replaced or removed). Returns a directory fd or
//  a negative errno with *err.
int ah_path_open_parent (int home_fd, const char *path, size_t len,
                         char leaf [NAME_MAX + 1], const char **err);

#endif
