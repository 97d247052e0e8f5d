/*  sandboxd/main.c: the static binary; everything is in the library.  */
#include "sandboxd/sandboxd.h"

int main (int argc, char **argv)
{
    return ah_sandboxd_main (argc, argv);
}
