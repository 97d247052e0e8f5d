/*  tests/docker/test_docker_mountinfo.c: finding the server's own
    container id from mountinfo (a sample taken from a Docker 20.10
    container on this machine), and nothing on the host.            */
#include "drivers/docker.h"
#include "../common/check.h"
#include <stdlib.h>
#include <unistd.h>

static char *
s_write (const char *text)
{
    char *path = strdup ("/tmp/ah-mountinfo-XXXXXX");
    int fd = mkstemp (path);
    if (fd < 0 || write (fd, text, strlen (text)) != (ssize_t) strlen (text)) {
        if (fd >= 0) close (fd);
        return path;
    }
    close (fd);
    return path;
}

int
main (void)
{
    const char *in_container =
        "69 52 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/a,upperdir=/b,workdir=/c\n"
        "86 69 254:0 /var/lib/docker/containers/31467d968147e3167e125e068454292aa2a4a09e7e6652f018fe720e27daf7d7/resolv.conf /etc/resolv.conf rw,relatime - ext4 /dev/vda rw\n"
        "87 69 254:0 /var/lib/docker/containers/31467d968147e3167e125e068454292aa2a4a09e7e6652f018fe720e27daf7d7/hostname /etc/hostname rw,relatime - ext4 /dev/vda rw\n"
        "88 69 254:0 /var/lib/docker/containers/31467d968147e3167e125e068454292aa2a4a09e7e6652f018fe720e27daf7d7/hosts /etc/hosts rw,relatime - ext4 /dev/vda rw\n";
    char *path = s_write (in_container);
    char *id = ah_docker_container_id_from_mountinfo (path);
    CHECK_STR (id, "31467d968147e3167e125e068454292aa2a4a09e7e6652f018fe720e27daf7d7");
    free (id);
    unlink (path);
    free (path);

    //  The host: no /etc/hostname mount.
    path = s_write ("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
                    "42 27 254:0 /var/lib/docker /var/lib/docker rw,relatime shared:1 - ext4 /dev/vda rw\n");
    id = ah_docker_container_id_from_mountinfo (path);
    CHECK (id == NULL);
    unlink (path);
    free (path);

    //  A short or non-hex id, a hostname bind from elsewhere: not taken.
    path = s_write ("87 69 254:0 /var/lib/docker/containers/31467d96/hostname /etc/hostname rw - ext4 /dev/vda rw\n"
                    "88 69 254:0 /srv/hostname /etc/hostname rw - ext4 /dev/vda rw\n");
    id = ah_docker_container_id_from_mountinfo (path);
    CHECK (id == NULL);
    unlink (path);
    free (path);

    CHECK (ah_docker_container_id_from_mountinfo ("/nonexistent/mountinfo") == NULL);
    return CHECK_DONE ();
}
