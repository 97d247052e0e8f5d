/*  sandboxd/passwd.h: look up an account in /etc/passwd ourselves.

    A static binary has no NSS: getpwnam would want glibc's shared
    modules at run time. /etc/passwd is a text file; we read it with caps
    (at most AH_PASSWD_MAX bytes, fields of bounded length).          */
#ifndef AH_SANDBOXD_PASSWD_H
#define AH_SANDBOXD_PASSWD_H

#include <stdbool.h>
#include <sys/types.h>

#define AH_PASSWD_MAX (1u << 20)

typedef struct {
    char  name [64];
    uid_t uid;
    gid_t gid;
    char  dir [256];
    char  shell [256];
} ah_passwd_t;

//  Find by name (name != NULL) or by uid. 0 found, -1 not (or unreadable).
//  file: NULL for /etc/passwd.
int ah_passwd_find (const char *file, const char *name, uid_t uid, ah_passwd_t *out);

//  The groups of /etc/group (file NULL) that list name as a member, after
//  gid (always first), without repeats: at most max, the count returned.
int ah_group_list (const char *file, const char *name, gid_t gid, gid_t *gids, int max);

//  Find a group by name. 0 found (*gid), -1 not.
int ah_group_find (const char *file, const char *name, gid_t *gid);

#endif
