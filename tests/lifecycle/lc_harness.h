/*  tests/lifecycle/lc_harness.h: the lifecycle actor's test harness
    (lc_harness.c): a driver that counts the fake one's calls and can
    slow it or fail it, the bus, the actor and a real SQLite file in a
    temporary directory, and helpers to ask the actor and read the rows.
    Shared by test_lifecycle.c (requests, states, readers) and
    test_lifecycle_repair.c (observations, hosts, destroys, limits,
    repairs, runtimes being prepared or gone).                          */
#ifndef AH_TEST_LC_HARNESS_H
#define AH_TEST_LC_HARNESS_H
#include "actors/lifecycle.h"
#include "common/bus.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/token.h"
#include "drivers/fake.h"
#include "config/config.h"
#include "store/store.h"
#include "tests/common/check.h"

#include <ftw.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    ah_driver_t base;
    ah_driver_t *inner;
    atomic_int creates, starts, stops, rebuilds, destroys, freezes, thaws;
    atomic_int start_delay_ms;
    atomic_int reader_starts, reader_stops;
    atomic_int reader_stop_delay_ms;
    atomic_int image_gone;          //  create, rebuild and start fail: the runtime's image is gone
    atomic_int image_checks;
    atomic_int start_fails;         //  start fails (for a reason of its own)
    atomic_int gone_once;           //  the next create or rebuild meets the image gone, which is
                                    //  back (made again by the builder) when it is asked after
    char reader_token [AH_TOKEN_HEX];   //  the last reader_start's (written before the count moves)
    atomic_int image_gen;           //  > 0: inspect says the container's image id is "sha256:gen<N>"
} counting_t;

extern char lc_dir [64];
extern char lc_db_path [128];
extern ah_config_t *lc_config;
extern counting_t lc_drv;
extern zactor_t *lc_bus, *lc_lifecycle;
extern zsock_t *lc_client, *lc_watch;
extern ah_store_t *lc_store;
extern int64_t lc_req;
extern const char *lc_subscribers [];

int c_gone (counting_t *c, const char *image, char **err);
int c_create (ah_driver_t *d, const ah_sandbox_spec_t *spec, char **err);
int c_image_exists (ah_driver_t *d, const char *image, bool *exists, char **err);
int c_start (ah_driver_t *d, const ah_boot_t *boot, char **err);
int c_stop (ah_driver_t *d, const char *id, char **err);
int c_rebuild (ah_driver_t *d, const ah_sandbox_spec_t *spec, char **err);
int c_freeze (ah_driver_t *d, const char *id, char **err);
int c_thaw (ah_driver_t *d, const char *id, char **err);
int c_destroy (ah_driver_t *d, const char *id, char **err);
int c_inspect (ah_driver_t *d, const char *id, ah_sandbox_status_t *st, char **err);
int c_reader_start (ah_driver_t *d, const ah_boot_t *boot, char **err);
int c_reader_stop (ah_driver_t *d, const char *id, char **err);
int c_list (ah_driver_t *d, char ***ids, char **err);
//  A temporary directory /tmp/<name>-XXXXXX (lc_dir), its database, a
//  configuration (the fake driver, the tunnel on 127.0.0.1:tunnel_port,
//  the source's lua/), the counting driver, the bus and the test's
//  sockets ("api", "watch"); the actor is not started. 0 / -1.
int lc_setup (const char *name, int tunnel_port);
//  Everything lc_setup made, the actor and the directory too.
void lc_teardown (void);
void lc_start_lifecycle_with (int hello_timeout_ms, bool ensure_images);
void lc_start_lifecycle (int hello_timeout_ms);
ah_msg_t *lc_call (ah_msg_t *msg);
ah_msg_t *lc_op (const char *type, const char *agent);
int lc_status (ah_msg_t **reply_p);
char *lc_col (const char *id, const char *column);
int64_t lc_count (const char *sql, const char *id);
int lc_sql (const char *sql, const char *id);
bool lc_col_is (const char *id, const char *column, const char *want);
bool lc_wait_state (const char *id, const char *state, int ms);
bool lc_saw_event (const char *id, const char *state, char *error, size_t error_size);
void lc_drain_events (void);
char *lc_fake_path (const char *id, const char *leaf);
bool lc_exists (const char *path);
void lc_write (const char *path, const char *text);
char *lc_create (const char *name);
void lc_off_bounds (const char *target);

//  The tests (test_lifecycle.c, test_lifecycle_repair.c)
char *test_create (void);
void test_destroy (const char *id);
void test_destroy_during_start (void);
void test_failure_and_retry (const char *id);
void test_hello (const char *id);
void test_idents (void);
void test_freeze (const char *id);
void test_image_gone (void);
void test_malformed (void);
void test_observed (const char *id);
void test_preparing (void);
void test_reader (const char *id);
void test_restart_repairs (void);
void test_stop_and_concurrent_start (const char *id);
void test_tenant_limits (void);
void test_unreachable (const char *id);
void test_update_and_rebuild (const char *id);

#endif
