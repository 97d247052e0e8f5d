/*  store/migrations.h: the numbered schema migrations (private to store/).
    Entry i has version i + 1; docs/schema.md shows each one's SQL.     */
#ifndef AH_STORE_MIGRATIONS_H
#define AH_STORE_MIGRATIONS_H

typedef struct {
    int version;
    const char *name;               //  what it is for, in a few words
    const char *sql;                //  one or more statements
} ah_migration_t;

extern const ah_migration_t ah_migrations [];
extern const int ah_migrations_count;

#endif
