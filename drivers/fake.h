/*  drivers/fake.h: the fake backend, for development and tests only.

    A sandbox is a directory <data_dir>/fake/<agent id>/ holding home/
    (the agent's home), state (one line: "created", "running" or
    "exited <code>", so a restarted server sees the truth), image (what it
    was built from) and, once started, boot.json (0600). Terminals and
    files are the server's own user's: nothing is isolated.

    Failure injection for tests: a file <data_dir>/fake/<id>/fail-<op> or
    <data_dir>/fake/fail-<op> (op: create, start, stop, rebuild, destroy)
    makes that operation fail with the file's first line as the message,
    for as long as the file exists.

    Thread-safe: one mutex inside guards every call.                   */
#ifndef AH_FAKE_H
#define AH_FAKE_H

#include "drivers/driver.h"
#include "config/config.h"

//  config is borrowed and must outlive the driver (data_dir, tunnel_listen).
//  NULL with *err (caller frees) if <data_dir>/fake cannot be made.
ah_driver_t *ah_fake_driver_new (const ah_config_t *config, char **err);

#endif
