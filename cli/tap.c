/*  cli/tap.c: the tap subscriber. The bus publishes every routed message
    as [type][sender][dest][map]; we decode the map with the same strict
    decoder the actors use and print ah_msg_to_json's line (bin fields
    show only their size). A frame that does not decode is reported on
    stderr and skipped: the tap is a diagnostic, it never stops on input. */
#include "cli/tap.h"
#include "cli/cmd.h"
#include "common/msg.h"

#include <czmq.h>
#include <fnmatch.h>
#include <stdio.h>

int ah_cli_tap (const char *endpoint, const char *glob, long count)
{
    zsys_init ();
    zsock_t *sub = zsock_new (ZMQ_SUB);
    if (!sub || zsock_connect (sub, "%s", endpoint) != 0) {
        fprintf (stderr, "agenthold tap: cannot connect to %s: %s\n", endpoint, zmq_strerror (zmq_errno ()));
        zsock_destroy (&sub);
        return 1;
    }
    zsock_set_subscribe (sub, "");
    zsock_set_rcvhwm (sub, 100000);
    long printed = 0;
    while (!zsys_interrupted && (count == 0 || printed < count)) {
        zmsg_t *msg = zmsg_recv (sub);
        if (!msg)
            break;                  //  interrupted
        if (zmsg_size (msg) != 4) {
            fprintf (stderr, "agenthold tap: skipped a message of %zu frames (want 4)\n", zmsg_size (msg));
            zmsg_destroy (&msg);
            continue;
        }
        char *type = zmsg_popstr (msg), *from = zmsg_popstr (msg), *to = zmsg_popstr (msg);
        zframe_t *body = zmsg_pop (msg);
        if (!glob || fnmatch (glob, type, 0) == 0) {
            char *err = NULL;
            ah_msg_t *m = ah_msg_decode (type, zframe_data (body), zframe_size (body), &err);
            if (m) {
                ah_msg_set_peer (m, from);
                char *line = ah_cmd_clean_json_text (ah_msg_to_json (m, to));
                if (line) {
                    printf ("%s\n", line);
                    fflush (stdout);
                    printed++;
                }
                free (line);
                ah_msg_destroy (&m);
            }
            else
                fprintf (stderr, "agenthold tap: skipped %s from %s to %s: %s\n", type, from, to,
                         err ? err : "malformed");
            free (err);
        }
        zframe_destroy (&body);
        zstr_free (&type);
        zstr_free (&from);
        zstr_free (&to);
        zmsg_destroy (&msg);
    }
    zsock_destroy (&sub);
    return 0;
}
