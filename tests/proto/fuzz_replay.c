/*  tests/proto/fuzz_replay.c: runs a libFuzzer target without libFuzzer,
    so its invariants are checked in every build (gcc, ASan) and not only
    in the clang fuzz build: first each file in the directories named on
    the command line (the seeds), then a fixed series of pseudo-random
    inputs. The target aborts on a broken invariant; reaching the end is
    the pass.                                                          */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static uint64_t s_state = 0x9e3779b97f4a7c15ull;

static uint64_t s_rand (void)
{
    s_state ^= s_state << 13;
    s_state ^= s_state >> 7;
    s_state ^= s_state << 17;
    return s_state;
}

static int s_run_dir (const char *path)
{
    DIR *dir = opendir (path);
    if (!dir) {
        fprintf (stderr, "cannot open seed directory %s\n", path);
        return -1;
    }
    int count = 0;
    struct dirent *e;
    static uint8_t buf [1 << 20];
    while ((e = readdir (dir))) {
        if (e->d_name [0] == '.')
            continue;
        char file [4096];
        snprintf (file, sizeof file, "%s/%s", path, e->d_name);
        FILE *f = fopen (file, "rb");
        if (!f)
            continue;
        size_t n = fread (buf, 1, sizeof buf, f);
        fclose (f);
        LLVMFuzzerTestOneInput (buf, n);
        count++;
    }
    closedir (dir);
    return count;
}

int main (int argc, char **argv)
{
    int seeds = 0;
    for (int i = 1; i < argc; i++) {
        int n = s_run_dir (argv [i]);
        if (n < 0)
            return 1;
        seeds += n;
    }
    //  Random inputs: mostly small, some long; the first byte of each is
    //  swept so every mode of the target is reached.
    static uint8_t buf [8192];
    const int rounds = 3000;
    for (int r = 0; r < rounds; r++) {
        size_t len = (s_rand () % 8 == 0)? s_rand () % sizeof buf: s_rand () % 300;
        for (size_t i = 0; i < len; i++)
            buf [i] = (uint8_t) s_rand ();
        if (len > 0)
            buf [0] = (uint8_t) r;
        LLVMFuzzerTestOneInput (buf, len);
    }
    fprintf (stderr, "%d seeds and %d random inputs ran clean\n", seeds, rounds);
    return 0;
}
