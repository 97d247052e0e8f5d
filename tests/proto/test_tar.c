/*  tests/proto/test_tar.c: the tar writer. Headers (fields, checksum),
    data padded to blocks, the end blocks, directories and symlinks, host
    files (their mode or a given one), and the refusals that leave the
    archive unchanged: a long name, the size limit, a missing file, a
    directory given as a file. The archive is then read back by tar(1).  */
#include "proto/tar.h"
#include "../common/check.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

//  An octal header field.
static unsigned long
s_octal (const uint8_t *h, size_t off, size_t len)
{
    char field [16] = "";
    memcpy (field, h + off, len < sizeof field - 1 ? len : sizeof field - 1);
    return strtoul (field, NULL, 8);
}

static bool
s_checksum_ok (const uint8_t *h)
{
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += (i >= 148 && i < 156) ? ' ' : h [i];
    return s_octal (h, 148, 8) == sum;
}

int
main (void)
{
    char dir [] = "/tmp/ah-test-tar-XXXXXX";
    CHECK (mkdtemp (dir) != NULL);
    char file [64], archive [64], cmd [1024];
    snprintf (file, sizeof file, "%s/script", dir);
    snprintf (archive, sizeof archive, "%s/out.tar", dir);
    FILE *f = fopen (file, "w");
    CHECK (f != NULL);
    if (f) {
        fputs ("#!/bin/sh\necho hello\n", f);
        fclose (f);
    }
    chmod (file, 0750);

    ah_tar_t tar = { .max = 0 };
    const char *json = "{\"agent_id\":\"0123456789ab\"}";
    CHECK (ah_tar_add (&tar, "etc/", AH_TAR_DIR, 0755, NULL, 0, NULL) == 0);
    CHECK (ah_tar_add (&tar, "etc/boot.json", AH_TAR_FILE, 0600, json, strlen (json), NULL) == 0);
    CHECK (ah_tar_add (&tar, "etc/link", AH_TAR_SYMLINK, 0777, NULL, 0, "boot.json") == 0);
    size_t size = 0;
    CHECK (ah_tar_add_file (&tar, "bin/script", file, 0, &size) == 0 && size == 21);
    CHECK (ah_tar_add_file (&tar, "bin/exec", file, 0755, NULL) == 0);
    CHECK (ah_buf_size (&tar.buf) == 512 + 1024 + 512 + 1024 + 1024);

    //  Refusals leave the archive as it was.
    size_t had = ah_buf_size (&tar.buf);
    char long_name [128];
    memset (long_name, 'x', 100);
    long_name [100] = 0;
    errno = 0;
    CHECK (ah_tar_add (&tar, long_name, AH_TAR_FILE, 0644, "x", 1, NULL) == -1 && errno == ENAMETOOLONG);
    CHECK (ah_buf_size (&tar.buf) == had);
    long_name [99] = 0;
    CHECK (ah_tar_add (&tar, "l", AH_TAR_SYMLINK, 0777, NULL, 0, long_name) == 0);
    had = ah_buf_size (&tar.buf);
    long_name [99] = 'x';
    CHECK (ah_tar_add (&tar, "l2", AH_TAR_SYMLINK, 0777, NULL, 0, long_name) == -1 && errno == ENAMETOOLONG);
    CHECK (ah_tar_add_file (&tar, "gone", "/nonexistent/agenthold", 0, NULL) == -1 && errno == ENOENT);
    CHECK (ah_tar_add_file (&tar, "dir", dir, 0, NULL) == -1 && errno == EINVAL);
    CHECK (ah_buf_size (&tar.buf) == had);
    CHECK (ah_tar_finish (&tar) == 0);
    CHECK (ah_buf_size (&tar.buf) == had + 1024);

    //  The headers.
    const uint8_t *h = ah_buf_head (&tar.buf);
    CHECK_STR ((const char *) h, "etc/");
    CHECK (h [156] == '5' && s_checksum_ok (h) && s_octal (h, 100, 8) == 0755);
    CHECK (memcmp (h + 257, "ustar", 6) == 0 && memcmp (h + 265, "root", 5) == 0);
    h += 512;
    CHECK_STR ((const char *) h, "etc/boot.json");
    CHECK (h [156] == '0' && s_checksum_ok (h) && s_octal (h, 100, 8) == 0600);
    CHECK (s_octal (h, 124, 12) == strlen (json) && s_octal (h, 108, 8) == 0 && s_octal (h, 116, 8) == 0);
    CHECK (memcmp (h + 512, json, strlen (json)) == 0);
    bool padded = true;
    for (size_t i = strlen (json); i < 512; i++)
        padded = padded && h [512 + i] == 0;
    CHECK (padded);
    h += 1024;
    CHECK (h [156] == '2' && s_checksum_ok (h) && strcmp ((const char *) h + 157, "boot.json") == 0);
    h += 512;
    CHECK_STR ((const char *) h, "bin/script");
    CHECK (s_octal (h, 100, 8) == 0750 && s_octal (h, 124, 12) == 21 && s_checksum_ok (h));
    h += 1024;
    CHECK (s_octal (h, 100, 8) == 0755 && s_checksum_ok (h));
    const uint8_t *end = ah_buf_head (&tar.buf) + ah_buf_size (&tar.buf) - 1024;
    bool zero = true;
    for (int i = 0; i < 1024; i++)
        zero = zero && end [i] == 0;
    CHECK (zero);

    //  tar(1) reads it back.
    f = fopen (archive, "wb");
    CHECK (f && fwrite (ah_buf_head (&tar.buf), 1, ah_buf_size (&tar.buf), f) == ah_buf_size (&tar.buf));
    if (f)
        fclose (f);
    snprintf (cmd, sizeof cmd, "tar -xOf '%s' etc/boot.json | grep -q 0123456789ab && "
              "tar -tvf '%s' | grep -q 'etc/link -> boot.json' && "
              "tar -xOf '%s' bin/exec | grep -q 'echo hello'", archive, archive, archive);
    CHECK (system (cmd) == 0);
    ah_tar_free (&tar);

    //  The limit counts the end blocks.
    ah_tar_t small = { .max = 2048 };
    CHECK (ah_tar_add (&small, "a", AH_TAR_FILE, 0644, "x", 1, NULL) == 0);
    CHECK (ah_tar_add (&small, "b", AH_TAR_FILE, 0644, "x", 1, NULL) == -1 && errno == EFBIG);
    CHECK (ah_tar_add_file (&small, "c", file, 0, NULL) == -1 && errno == EFBIG);
    CHECK (ah_buf_size (&small.buf) == 1024);
    CHECK (ah_tar_finish (&small) == 0 && ah_buf_size (&small.buf) == 2048);
    ah_tar_free (&small);

    snprintf (cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK (system (cmd) == 0);
    return CHECK_DONE ();
}
