/*  actors/desired.c: the desired fields of an agent (see desired.h).   */
#include "actors/desired.h"
#include "catalog/catalog.h"
#include "common/bounds.h"
#include "common/ident.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool s_given (const ah_msg_t *msg, const char *key)
{
    return ah_msg_has (msg, key) && !ah_msg_is_nil (msg, key);
}

static const char *s_ident (const ah_msg_t *msg, const char *key, ah_ident_t kind, char *buf, size_t size)
{
    if (!s_given (msg, key))
        return NULL;
    const char *v = ah_msg_str (msg, key);
    if (!v) {
        snprintf (buf, size, "field '%s' must be a string (%s)", key, ah_ident_what (kind));
        return buf;
    }
    const char *why = ah_ident_check (kind, v);
    if (why)
        snprintf (buf, size, "field '%s': %s '%.300s' %s", key, ah_ident_what (kind), v, why);
    return why ? buf : NULL;
}

const char *ah_desired_check (const ah_msg_t *msg, char *buf, size_t size)
{
    if (s_ident (msg, "image", AH_IDENT_IMAGE, buf, size) || s_ident (msg, "runtime", AH_IDENT_RUNTIME, buf, size))
        return buf;
    static const char *numbers [] = { "cpus", "memory_mb", "idle_minutes" };
    for (size_t i = 0; i < sizeof numbers / sizeof numbers [0]; i++) {
        if (!s_given (msg, numbers [i]))
            continue;
        const ah_bound_t *b = ah_bound (numbers [i]);
        double v = ah_msg_double (msg, numbers [i], NAN);
        char rule [200];
        if (isnan (v)) {
            snprintf (buf, size, "field '%s' must be %s (got no number)", numbers [i],
                      ah_bound_rule (b, rule, sizeof rule));
            return buf;
        }
        if (ah_bound_check (b, v, buf, size))
            return buf;
    }
    //  An admin's override of the runtime's harness: the JSON text of
    //  {"command", "env"}, held to the catalog's own "harness" rules.
    if (s_given (msg, "harness")) {
        const char *text = ah_msg_str (msg, "harness");
        json_t *j = text ? json_loads (text, JSON_REJECT_DUPLICATES, NULL) : NULL;
        ah_catalog_harness_t h;
        char *err = NULL;
        if (!j)
            snprintf (buf, size, "field 'harness' must be an object {\"command\": [\"agent\", \"--acp\"], "
                      "\"env\": {...}} (the JSON text of one, in a message)");
        else if (ah_catalog_harness_parse (j, &h, &err))
            snprintf (buf, size, "%s", err ? err : "field 'harness' is not a harness");
        else
            ah_catalog_harness_clear (&h);
        bool bad = !j || err;
        json_decref (j);
        free (err);
        if (bad)
            return buf;
    }
    if (s_given (msg, "image") && s_given (msg, "runtime")) {
        snprintf (buf, size, "give runtime or image, not both: the runtime decides the image");
        return buf;
    }
    return NULL;
}
