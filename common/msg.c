/*  common/msg.c: proto/msg.h messages on ZeroMQ sockets, and as JSON.  */
#include "common/msg.h"
#include "common/log.h"

#include <jansson.h>
#include <msgpack.h>
#include <string.h>

static void s_free_body (void *data, void *hint)
{
    (void) hint;
    free (data);
}

int ah_msg_send (ah_msg_t **self_p, zsock_t *sock, const char *route)
{
    if (!self_p || !*self_p)
        return -1;
    ah_msg_t *self = *self_p;
    *self_p = NULL;
    uint8_t *data = NULL;
    size_t size = 0;
    int rc = -1;
    if (ah_msg_encode (self, &data, &size))
        goto out;
    void *handle = zsock_resolve (sock);
    const char *type = ah_msg_type (self);
    if (route && zmq_send (handle, route, strlen (route), ZMQ_SNDMORE) < 0)
        goto out;
    if (zmq_send (handle, type, strlen (type), ZMQ_SNDMORE) < 0)
        goto out;
    //  The body is handed to ZeroMQ, not copied (inproc passes it on as
    //  it is): a channel's bytes cross to the other thread in this buffer.
    zmq_msg_t body;
    if (zmq_msg_init_data (&body, data, size, s_free_body, NULL))
        goto out;
    data = NULL;
    if (zmq_msg_send (&body, handle, 0) < 0) {
        zmq_msg_close (&body);
        goto out;
    }
    rc = 0;
out:
    free (data);
    ah_msg_destroy (&self);
    return rc;
}

static char *s_frame_name (zframe_t *frame, const char *what, char **err)
{
    size_t n = zframe_size (frame);
    if (n == 0 || n > AH_MSG_MAX_TYPE) {
        if (err) *err = zsys_sprintf ("%s frame must be 1..%d bytes, got %zu", what, AH_MSG_MAX_TYPE, n);
        return NULL;
    }
    const char *p = (const char *) zframe_data (frame);
    for (size_t i = 0; i < n; i++)
        if (p [i] < 0x21 || p [i] > 0x7e) {
            if (err) *err = zsys_sprintf ("%s frame holds a non-printable byte", what);
            return NULL;
        }
    return zframe_strdup (frame);
}

static void s_release_zmsg (void *held)
{
    zmsg_t *zmsg = held;
    zmsg_destroy (&zmsg);
}

ah_msg_t *ah_msg_recv_fault (zsock_t *sock, bool with_route, ah_msg_fault_t *fault)
{
    memset (fault, 0, sizeof *fault);
    zmsg_t *zmsg = zmsg_recv (sock);
    if (!zmsg) {
        fault->error = strdup ("interrupted");
        return NULL;
    }
    ah_msg_t *self = NULL;
    char *route = NULL, *type = NULL;
    size_t want = with_route ? 3 : 2;
    size_t frames = zmsg_size (zmsg);
    if (with_route && frames >= 1 && (route = s_frame_name (zmsg_first (zmsg), "route", NULL)))
        snprintf (fault->route, sizeof fault->route, "%s", route);
    if (frames != want) {
        fault->error = zsys_sprintf ("expected %zu frames, got %zu", want, frames);
        goto out;
    }
    if (with_route && !route) {
        s_frame_name (zmsg_first (zmsg), "route", &fault->error);
        goto out;
    }
    zframe_t *tf = with_route ? zmsg_next (zmsg) : zmsg_first (zmsg);
    zframe_t *body = zmsg_next (zmsg);
    fault->has_req = ah_msg_peek_req (zframe_data (body), zframe_size (body), &fault->req);
    if (!(type = s_frame_name (tf, "type", &fault->error)))
        goto out;
    snprintf (fault->type, sizeof fault->type, "%s", type);
    char *why = NULL;
    //  A channel's bytes stay in the frame they came in: the message
    //  holds the ZeroMQ message and its bins point into it.
    self = ah_msg_decode_borrowing (type, zframe_data (body), zframe_size (body), &why);
    if (!self) {
        fault->error = zsys_sprintf ("%s: %s", type, why ? why : "malformed");
        free (why);
        goto out;
    }
    ah_msg_hold (self, zmsg, s_release_zmsg);
    zmsg = NULL;
    if (route)
        ah_msg_set_peer (self, route);
out:
    zstr_free (&route);
    zstr_free (&type);
    zmsg_destroy (&zmsg);
    return self;
}

void ah_msg_fault_clear (ah_msg_fault_t *fault)
{
    zstr_free (&fault->error);
}

ah_msg_t *ah_msg_recv (zsock_t *sock, bool with_route, char **err)
{
    ah_msg_fault_t fault;
    ah_msg_t *self = ah_msg_recv_fault (sock, with_route, &fault);
    if (err) {
        *err = fault.error;
        fault.error = NULL;
    }
    ah_msg_fault_clear (&fault);
    return self;
}

json_t *ah_json_bytes (const char *data, size_t size)
{
    json_t *j = json_stringn (data ? data : "", data ? size : 0);
    if (j)
        return j;
    char *copy = malloc (size + 1);
    if (!copy)
        return NULL;
    for (size_t i = 0; i < size; i++)
        copy [i] = (unsigned char) data [i] >= 0x80 || data [i] == 0 ? '?' : data [i];
    copy [size] = 0;
    j = json_stringn (copy, size);
    free (copy);
    return j;
}

//  msgpack object -> JSON, depth-bounded. Raw fields were validated on
//  the way in, so the unpacker sees honest counts.
static json_t *s_obj_json (const msgpack_object *o, int depth)
{
    if (depth > 32)
        return json_string ("...");
    switch (o->type) {
        case MSGPACK_OBJECT_NIL: return json_null ();
        case MSGPACK_OBJECT_BOOLEAN: return json_boolean (o->via.boolean);
        case MSGPACK_OBJECT_POSITIVE_INTEGER: return json_integer ((json_int_t) o->via.u64);
        case MSGPACK_OBJECT_NEGATIVE_INTEGER: return json_integer ((json_int_t) o->via.i64);
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64: return json_real (o->via.f64);
        case MSGPACK_OBJECT_STR: return ah_json_bytes (o->via.str.ptr, o->via.str.size);
        case MSGPACK_OBJECT_BIN: return json_pack ("{s:I}", "bin", (json_int_t) o->via.bin.size);
        case MSGPACK_OBJECT_ARRAY: {
            json_t *a = json_array ();
            for (uint32_t i = 0; i < o->via.array.size; i++)
                json_array_append_new (a, s_obj_json (&o->via.array.ptr [i], depth + 1));
            return a;
        }
        case MSGPACK_OBJECT_MAP: {
            json_t *m = json_object ();
            for (uint32_t i = 0; i < o->via.map.size; i++) {
                const msgpack_object *k = &o->via.map.ptr [i].key;
                char key [130];
                if (k->type == MSGPACK_OBJECT_STR && k->via.str.size < 128) {
                    memcpy (key, k->via.str.ptr, k->via.str.size);
                    key [k->via.str.size] = 0;
                }
                else
                    snprintf (key, sizeof key, "#%u", i);
                json_object_set_new (m, key, s_obj_json (&o->via.map.ptr [i].val, depth + 1));
            }
            return m;
        }
        default: return json_string ("(ext)");
    }
}

char *ah_msg_to_json (const ah_msg_t *self, const char *to)
{
    json_t *fields = json_object ();
    for (size_t i = 0; i < ah_msg_count (self); i++) {
        const char *key = ah_msg_key (self, i);
        json_t *v;
        size_t size;
        const void *p;
        const char *text;
        if ((p = ah_msg_bin (self, key, &size)))
            v = json_pack ("{s:I}", "bin", (json_int_t) size);
        else if ((p = ah_msg_raw (self, key, &size))) {
            msgpack_unpacked u;
            msgpack_unpacked_init (&u);
            if (msgpack_unpack_next (&u, p, size, NULL) == MSGPACK_UNPACK_SUCCESS)
                v = s_obj_json (&u.data, 0);
            else
                v = json_null ();
            msgpack_unpacked_destroy (&u);
        }
        else if ((text = ah_msg_str (self, key)))
            v = ah_json_bytes (text, strlen (text));
        else if (ah_msg_is_nil (self, key))
            v = json_null ();
        else if (ah_msg_has (self, key) && ah_msg_int (self, key, 1) == ah_msg_int (self, key, 2))
            v = json_integer ((json_int_t) ah_msg_int (self, key, 0));
        else {
            //  bool or double: tell them apart by the fallbacks.
            bool b1 = ah_msg_bool (self, key, true), b2 = ah_msg_bool (self, key, false);
            if (b1 == b2)
                v = json_boolean (b1);
            else
                v = json_real (ah_msg_double (self, key, 0));
        }
        json_object_set_new (fields, key, v);
    }
    json_t *root = json_pack ("{s:s, s:s, s:s, s:o}", "type", ah_msg_type (self),
                              "from", ah_msg_peer (self), "to", to ? to : "", "fields", fields);
    char *s = json_dumps (root, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref (root);
    return s;
}
