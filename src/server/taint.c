/*  A kernel's taint (taint.h).
 *
 *  Why the relay and not the client: a Jupyter client renders the outputs
 *  of a cell its person ran as trusted (JupyterLab 4, Notebook 6.4: their
 *  scripts run), and it cannot know that code from the agent has since
 *  hooked the kernel (IPython's post_run_cell event, sys.displayhook, a
 *  thread, update_display_data on the person's own display ids). korch
 *  relays every byte the kernel sends to every client: here it can make
 *  sure none of them runs script, for every client, with or without korch's
 *  JupyterLab extension.
 */
#include "taint.h"
#include "korch/log.h"
#include "korch/uuid.h" /* korch_iso8601_now */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct srv_taint {
    korch_neutraliser_t *neut;
    bool on;
    char reason[160];
    char since[32];             /* ISO 8601 */
    char kernel_id[40];
    uint64_t neutralised;
};

srv_taint_t *srv_taint_new(const char *kernel_id)
{
    srv_taint_t *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    char hint[256];
    snprintf(hint, sizeof hint,
             "Restart the kernel to see its outputs in full again, or, if you trust it, lift this yourself: "
             "DELETE /api/kernels/%s/untrusted on korch.",
             kernel_id);
    snprintf(t->kernel_id, sizeof t->kernel_id, "%s", kernel_id);
    t->neut = korch_neutraliser_new(hint);
    if (!t->neut) {
        free(t);
        return NULL;
    }
    return t;
}

void srv_taint_destroy(srv_taint_t **pt)
{
    srv_taint_t *t = *pt;
    if (!t)
        return;
    korch_neutraliser_destroy(&t->neut);
    free(t);
    *pt = NULL;
}

bool srv_taint_set(srv_taint_t *t, const char *why)
{
    if (!t || t->on)
        return false;
    t->on = true;
    snprintf(t->reason, sizeof t->reason, "%s", why ? why : "asked for");
    korch_iso8601_now(t->since);
    korch_notice("kernel %.8s: outputs untrusted from now (%s): script in them is removed", t->kernel_id, t->reason);
    return true;
}

bool srv_taint_clear(srv_taint_t *t)
{
    if (!t || !t->on)
        return false;
    t->on = false;
    t->reason[0] = t->since[0] = 0;
    korch_notice("kernel %.8s: outputs trusted again", t->kernel_id);
    return true;
}

bool srv_taint_on(const srv_taint_t *t) { return t && t->on; }

uint64_t srv_taint_neutralised(const srv_taint_t *t) { return t ? t->neutralised : 0; }

void srv_taint_model(const srv_taint_t *t, json_t *model)
{
    json_object_set_new(model, "untrusted", json_boolean(srv_taint_on(t)));
    if (srv_taint_on(t)) {
        json_object_set_new(model, "untrusted_reason", json_string(t->reason));
        json_object_set_new(model, "untrusted_since", json_string(t->since));
    }
}

json_t *srv_taint_notice(const srv_taint_t *t)
{
    return json_pack("{s:b, s:s}", "untrusted", srv_taint_on(t), "reason", t && t->on ? t->reason : "");
}

/* What a relayed IOPub message's content is needed for: the types the
   neutraliser rewrites (tainted), the comms it remembers (always). */
static bool s_needed(const char *type, bool tainted)
{
    static const char *const rewritten[] = {"display_data", "execute_result", "update_display_data", "comm_msg",
                                            NULL};
    if (strcmp(type, "comm_open") == 0 || strcmp(type, "comm_close") == 0)
        return true;
    for (const char *const *r = rewritten; tainted && *r; r++)
        if (strcmp(type, *r) == 0)
            return true;
    return false;
}

#define MAX_CONTENT (32u << 20) /* a tainted kernel's bigger bundle is dropped, not parsed */

korch_neut_rc_t srv_taint_filter(srv_taint_t *t, korch_channel_t ch, const korch_msg_t *msg, korch_msg_raw_t *raw,
                                 korch_msg_t **out)
{
    *out = NULL;
    if (!t || ch == KORCH_CH_STDIN) /* input_request's prompt is text */
        return KORCH_NEUT_KEEP;
    const char *type = korch_msg_type(msg);
    const json_t *content = msg->content;
    json_t *parsed = NULL;
    if (!content && s_needed(type, t->on)) {
        /* korch itself did not need it (not its own execution): the relay
           has only the kernel's bytes */
        zframe_t *f = raw ? raw->frame[3] : NULL;
        if (f && zframe_size(f) <= MAX_CONTENT)
            parsed = json_loadb((const char *)zframe_data(f), zframe_size(f), 0, NULL);
        if (!json_is_object(parsed)) {
            json_decref(parsed);
            if (!t->on)
                return KORCH_NEUT_KEEP;
            t->neutralised++;
            korch_info("kernel %.8s: a %s too big or malformed to check dropped (outputs untrusted)", t->kernel_id,
                       type);
            return KORCH_NEUT_DROP; /* nothing unchecked goes out */
        }
        content = parsed;
    }
    json_t *clean = NULL;
    unsigned removed = 0;
    korch_neut_rc_t rc = korch_neutraliser_message(t->neut, t->on, type, content, &clean, &removed);
    json_decref(parsed);
    if (rc == KORCH_NEUT_KEEP)
        return rc;
    t->neutralised++;
    if (rc == KORCH_NEUT_CHANGED) {
        korch_msg_t *m = korch_msg_new(type, clean); /* steals clean */
        json_t *h = json_deep_copy(msg->header), *ph = json_deep_copy(msg->parent_header),
               *md = json_deep_copy(msg->metadata);
        zmsg_t *bufs = msg->buffers ? zmsg_dup(msg->buffers) : zmsg_new();
        if (!m || !h || !ph || !md || !bufs) {
            korch_msg_destroy(&m);
            json_decref(h);
            json_decref(ph);
            json_decref(md);
            zmsg_destroy(&bufs);
            return KORCH_NEUT_DROP; /* nothing unchecked goes out */
        }
        json_decref(m->header);
        json_decref(m->parent_header);
        json_decref(m->metadata);
        zmsg_destroy(&m->buffers);
        m->header = h;
        m->parent_header = ph;
        m->metadata = md;
        m->buffers = bufs;
        *out = m;
    }
    char what[256];
    korch_htmlsafe_what(removed, what, sizeof what);
    korch_debug("kernel %.8s: %s %s (%s)", t->kernel_id, korch_msg_type(msg),
                rc == KORCH_NEUT_DROP ? "dropped" : "neutralised", *what ? what : "rewritten");
    return rc;
}
