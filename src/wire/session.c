/*  korch_session: HMAC-SHA256 signing, verification and replay protection.
 *
 *  Spec (messaging.rst, "The Wire Protocol"): "The signature is the HMAC hex
 *  digest of the concatenation of: a shared key (typically the key field of a
 *  connection file), the serialized header dict, the serialized parent header
 *  dict, the serialized metadata dict, the serialized content dict". The
 *  digest is computed over the bytes as sent, so we verify over the raw
 *  frames and parse JSON only afterwards.
 */
#include "korch/session.h"
#include "korch/jsonstr.h"
#include "korch/log.h"
#include "korch/uuid.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <time.h>
#include <unistd.h>

#define DELIM "<IDS|MSG>"
#define DELIM_LEN 9

struct korch_session {
    char id[37];
    char username[64];
    bool signed_;                   /* a key is set */
    EVP_MAC *mac;
    EVP_MAC_CTX *mac_tmpl;          /* initialised with the key; duplicated per message */
    korch_session_limits_t lim;
    /* The digests seen (replays refused), 16 bytes each (the first half of
       the HMAC: a false match is a 2^-128 chance): a FIFO ring, grown by
       doubling up to lim.digest_history entries, then the oldest goes; and
       an open-addressing index of it (ring position + 1, 0 = empty; at most
       half full), so memory follows what was seen: 24 bytes a digest, at
       most 1.5 MiB at the default 65536, instead of a string and a hash
       item each (~200 bytes). */
    uint8_t (*ring)[16];
    size_t ring_cap, ring_head, ring_len;
    uint32_t *index;
    size_t index_size;              /* a power of two */
    uint64_t counter;
    korch_session_stats_t stats;
};

static const char *const s_reject_names[KORCH_REJ__COUNT] = {
    "no_delimiter", "short", "unsigned", "bad_signature", "duplicate", "too_big", "bad_json", "bad_header",
};

const char *korch_reject_name(korch_reject_t why)
{
    return (unsigned)why < KORCH_REJ__COUNT ? s_reject_names[why] : "unknown";
}

korch_session_t *korch_session_new(const void *key, size_t key_len, const char *username,
                                   const korch_session_limits_t *limits, korch_err_t *err)
{
    korch_session_t *self = calloc(1, sizeof *self);
    if (!self) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    if (korch_uuid(self->id) != KORCH_OK) { /* no random bytes: no predictable session id either */
        korch_err_set(err, KORCH_E_IO, "no random bytes for a session id (the system's RNG failed)");
        goto fail;
    }
    if (!username)
        username = getenv("USER");
    snprintf(self->username, sizeof self->username, "%s", username && *username ? username : "korch");
    self->lim = (korch_session_limits_t){1 << 20, 256u << 20, 256u << 20, 65536, 8u << 20, 32u << 20};
    if (limits) {
        if (limits->max_json_part)
            self->lim.max_json_part = limits->max_json_part;
        if (limits->max_content)
            self->lim.max_content = limits->max_content;
        if (limits->max_buffers_total)
            self->lim.max_buffers_total = limits->max_buffers_total;
        if (limits->digest_history)
            self->lim.digest_history = limits->digest_history;
        if (limits->max_stream_text)
            self->lim.max_stream_text = limits->max_stream_text;
        if (limits->max_rich_content)
            self->lim.max_rich_content = limits->max_rich_content;
    }
    if (self->lim.digest_history > UINT32_MAX / 4)
        self->lim.digest_history = UINT32_MAX / 4;
    if (key && key_len) {
        self->signed_ = true;
        self->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
        self->mac_tmpl = self->mac ? EVP_MAC_CTX_new(self->mac) : NULL;
        OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
                               OSSL_PARAM_construct_end()};
        if (!self->mac_tmpl || !EVP_MAC_init(self->mac_tmpl, key, key_len, params)) {
            korch_err_set(err, KORCH_E_INVALID, "openssl cannot set up HMAC-SHA256 with the connection key");
            goto fail;
        }
    }
    return self;
fail:
    korch_session_destroy(&self);
    return NULL;
}

void korch_session_destroy(korch_session_t **pself)
{
    if (!pself || !*pself)
        return;
    korch_session_t *self = *pself;
    free(self->ring);
    free(self->index);
    EVP_MAC_CTX_free(self->mac_tmpl);
    EVP_MAC_free(self->mac);
    free(self);
    *pself = NULL;
}

const char *korch_session_id(const korch_session_t *self) { return self->id; }
const korch_session_stats_t *korch_session_stats(const korch_session_t *self) { return &self->stats; }

void korch_session_sign(korch_session_t *self, const void *const parts[4], const size_t lens[4], char hex[65])
{
    hex[0] = 0;
    if (!self->signed_)
        return;
    unsigned char md[EVP_MAX_MD_SIZE];
    size_t mdlen = 0;
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_dup(self->mac_tmpl);
    if (!ctx)
        return;
    for (int i = 0; i < 4; i++)
        EVP_MAC_update(ctx, parts[i], lens[i]);
    if (EVP_MAC_final(ctx, md, &mdlen, sizeof md) && mdlen == 32) {
        static const char digits[] = "0123456789abcdef";
        for (size_t i = 0; i < 32; i++) {
            hex[2 * i] = digits[md[i] >> 4];
            hex[2 * i + 1] = digits[md[i] & 15];
        }
        hex[64] = 0;
    }
    EVP_MAC_CTX_free(ctx);
}

const char *korch_session_stamp(korch_session_t *self, korch_msg_t *msg)
{
    const char *have = json_string_value(json_object_get(msg->header, "msg_id"));
    if (have && *have)
        return have;
    char id[96], date[32];
    /* Like jupyter_client: a per-session prefix and a counter, unique and cheap. */
    snprintf(id, sizeof id, "%.8s%.4s_%d_%llu", self->id, self->id + 9, (int)getpid(),
             (unsigned long long)++self->counter);
    korch_iso8601_now(date);
    json_object_set_new(msg->header, "msg_id", json_string(id));
    json_object_set_new(msg->header, "session", json_string(self->id));
    json_object_set_new(msg->header, "username", json_string(self->username));
    json_object_set_new(msg->header, "date", json_string(date));
    json_object_set_new(msg->header, "version", json_string("5.3"));
    return json_string_value(json_object_get(msg->header, "msg_id"));
}

zmsg_t *korch_session_serialize(korch_session_t *self, korch_msg_t **pmsg)
{
    korch_msg_t *msg = *pmsg;
    *pmsg = NULL;
    if (!msg)
        return NULL;
    korch_session_stamp(self, msg);
    json_t *parts_json[4] = {msg->header, msg->parent_header, msg->metadata, msg->content};
    char *parts[4] = {0};
    size_t lens[4];
    zmsg_t *out = NULL;
    for (int i = 0; i < 4; i++) {
        parts[i] = json_dumps(parts_json[i], JSON_COMPACT);
        if (!parts[i])
            goto out;
        lens[i] = strlen(parts[i]);
    }
    char sig[65];
    korch_session_sign(self, (const void *const *)parts, lens, sig);
    out = zmsg_new();
    if (!out)
        goto out;
    zframe_t *f;
    while ((f = zmsg_pop(msg->identities)))
        zmsg_append(out, &f);
    zmsg_addmem(out, DELIM, DELIM_LEN);
    zmsg_addmem(out, sig, strlen(sig));
    for (int i = 0; i < 4; i++) {
        f = zframe_new(parts[i], lens[i]);
        if (!f) {
            zmsg_destroy(&out);
            goto out;
        }
        zmsg_append(out, &f);
    }
    while ((f = zmsg_pop(msg->buffers)))
        zmsg_append(out, &f);
    self->stats.sent++;
out:
    for (int i = 0; i < 4; i++)
        free(parts[i]);
    korch_msg_destroy(&msg);
    return out;
}

korch_rc_t korch_session_send(korch_session_t *self, zsock_t *sock, korch_msg_t **msg, korch_err_t *err)
{
    zmsg_t *frames = korch_session_serialize(self, msg);
    if (!frames)
        return korch_err_set(err, KORCH_E_NOMEM, "cannot serialize message: out of memory");
    if (zmsg_send(&frames, sock) != 0) {
        zmsg_destroy(&frames);
        return korch_err_set(err, KORCH_E_IO, "cannot send message: %s", zmq_strerror(zmq_errno()));
    }
    return KORCH_OK;
}

static bool s_is_hex64(const unsigned char *p, size_t n)
{
    if (n != 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
            return false;
    return true;
}

/* The first 16 bytes of a digest in 64 hex digits (s_is_hex64). */
static void s_digest16(const char *hex, uint8_t out[16])
{
    for (int i = 0; i < 16; i++) {
        int hi = hex[2 * i] <= '9' ? hex[2 * i] - '0' : hex[2 * i] - 'a' + 10;
        int lo = hex[2 * i + 1] <= '9' ? hex[2 * i + 1] - '0' : hex[2 * i + 1] - 'a' + 10;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
}

static size_t s_home(const korch_session_t *self, const uint8_t d[16])
{
    uint64_t h;
    memcpy(&h, d, sizeof h); /* an HMAC: already uniform */
    return (size_t)h & (self->index_size - 1);
}

/* Is d in the index? Its index slot in *at (else the empty slot it would take). */
static bool s_find(const korch_session_t *self, const uint8_t d[16], size_t *at)
{
    size_t mask = self->index_size - 1;
    for (size_t i = s_home(self, d);; i = (i + 1) & mask) {
        uint32_t v = self->index[i];
        if (!v || memcmp(self->ring[v - 1], d, 16) == 0) {
            *at = i;
            return v != 0;
        }
    }
}

static bool s_seen(const korch_session_t *self, const char *hex)
{
    uint8_t d[16];
    size_t at;
    s_digest16(hex, d);
    return self->index_size && s_find(self, d, &at);
}

/* Take the entry at index slot i out (backward-shift deletion: the entries
   after it in its run move up, so no lookup stops early). */
static void s_unindex(korch_session_t *self, size_t i)
{
    size_t mask = self->index_size - 1;
    for (size_t j = (i + 1) & mask; self->index[j]; j = (j + 1) & mask) {
        size_t home = s_home(self, self->ring[self->index[j] - 1]);
        /* j's entry may fill i when its home is not in (i, j] (cyclically) */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            self->index[i] = self->index[j];
            i = j;
        }
    }
    self->index[i] = 0;
}

/* An index of size for the ring as it is; false without memory. */
static bool s_reindex(korch_session_t *self, size_t size)
{
    uint32_t *index = calloc(size, sizeof *index);
    if (!index)
        return false;
    free(self->index);
    self->index = index;
    self->index_size = size;
    for (size_t k = 0; k < self->ring_len; k++) {
        size_t pos = (self->ring_head + k) % self->ring_cap, at;
        s_find(self, self->ring[pos], &at);
        self->index[at] = (uint32_t)pos + 1;
    }
    return true;
}

/* Remember a verified digest; forget the oldest when full. Out of memory,
   it is not remembered (a replay of it would pass: the message was good). */
static void s_remember(korch_session_t *self, const char *hex)
{
    size_t cap = self->lim.digest_history;
    if (self->ring_len == self->ring_cap && self->ring_cap < cap) { /* grow (ring_head is 0 until full) */
        size_t n = self->ring_cap ? self->ring_cap * 2 : 64;
        if (n > cap)
            n = cap;
        void *r = realloc(self->ring, n * sizeof *self->ring);
        if (!r)
            return;
        self->ring = r;
        self->ring_cap = n;
    }
    if (self->index_size < 2 * self->ring_cap) {
        size_t size = self->index_size ? self->index_size : 128;
        while (size < 2 * self->ring_cap)
            size *= 2;
        if (!s_reindex(self, size))
            return;
    }
    size_t at;
    if (self->ring_len == self->ring_cap) { /* full: the oldest goes */
        if (s_find(self, self->ring[self->ring_head], &at))
            s_unindex(self, at);
        self->ring_head = (self->ring_head + 1) % self->ring_cap;
        self->ring_len--;
    }
    size_t pos = (self->ring_head + self->ring_len) % self->ring_cap;
    s_digest16(hex, self->ring[pos]);
    self->ring_len++;
    if (!s_find(self, self->ring[pos], &at))
        self->index[at] = (uint32_t)pos + 1;
}

static json_t *s_parse_object(zframe_t *f)
{
    json_t *v = json_loadb((const char *)zframe_data(f), zframe_size(f), JSON_ALLOW_NUL, NULL);
    if (v && !json_is_object(v)) {
        json_decref(v);
        v = NULL;
    }
    return v;
}

/* ---- bounded parse of large stream messages ----------------------------
 * ipykernel flushes stdout every 0.2 s, so a fast print arrives as ONE
 * stream message of tens of MB. Parsing that with jansson would hold the
 * frame, jansson's buffer and the string at once; instead the text is
 * decoded straight from the frame, keeping at most max_stream_text bytes and
 * counting the rest in content.korch_dropped: one copy of what is kept and
 * none of the rest. It serves every stream message over 64 KiB. Anything
 * unusual falls back to the full parser.
 *
 * So on_message observers see the text of a huge message already cut to the
 * limit, with korch_dropped saying how much is missing. */

typedef struct {
    const char *p, *end;
} s_cursor_t;

static void s_ws(s_cursor_t *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool s_string(s_cursor_t *c, char *out, size_t cap, size_t *len, size_t *dropped)
{
    return korch_jsonstr_decode(&c->p, c->end, out, cap, len, dropped);
}

/* {"name": "...", "text": "..."} -> a new content object, or NULL. */
static json_t *s_parse_stream_bounded(const char *data, size_t size, size_t keep)
{
    s_cursor_t c = {data, data + size};
    char name[64], key[16];
    size_t name_len = 0, text_len = 0, dropped = 0, klen, kdrop, ndrop = 0;
    bool have_name = false, have_text = false;
    /* the decoded text is never longer than the frame: no need to allocate
       all of max_stream_text (8 MiB) for a 65 KiB message */
    if (keep > size)
        keep = size;
    char *text = malloc(keep + 1);
    json_t *out = NULL;
    if (!text)
        return NULL;
    s_ws(&c);
    if (c.p >= c.end || *c.p++ != '{')
        goto out;
    for (;;) {
        s_ws(&c);
        kdrop = 0;
        if (!s_string(&c, key, sizeof key, &klen, &kdrop) || kdrop)
            goto out;
        s_ws(&c);
        if (c.p >= c.end || *c.p++ != ':')
            goto out;
        s_ws(&c);
        if (klen == 4 && memcmp(key, "name", 4) == 0 && !have_name) {
            if (!s_string(&c, name, sizeof name, &name_len, &ndrop) || ndrop)
                goto out;
            have_name = true;
        } else if (klen == 4 && memcmp(key, "text", 4) == 0 && !have_text) {
            if (!s_string(&c, text, keep, &text_len, &dropped))
                goto out;
            have_text = true;
        } else
            goto out; /* an unexpected member: let jansson judge */
        s_ws(&c);
        if (c.p < c.end && *c.p == ',') {
            c.p++;
            continue;
        }
        if (c.p < c.end && *c.p == '}') {
            c.p++;
            break;
        }
        goto out;
    }
    s_ws(&c);
    if (c.p != c.end || !have_name || !have_text)
        goto out;
    json_t *jname = json_stringn(name, name_len), *jtext = json_stringn(text, text_len);
    if (jname && jtext)
        out = json_pack("{s:o, s:o, s:I}", "name", jname, "text", jtext, "korch_dropped", (json_int_t)dropped);
    else {
        json_decref(jname);
        json_decref(jtext);
    }
out:
    free(text);
    return out;
}

static korch_rc_t s_reject(korch_session_t *self, korch_reject_t why, korch_reject_t *pwhy, korch_err_t *err,
                           const char *detail)
{
    self->stats.rejected[why]++;
    if (pwhy)
        *pwhy = why;
    korch_debug("message rejected: %s: %s", s_reject_names[why], detail);
    return korch_err_set(err, KORCH_E_PROTOCOL, "message rejected (%s): %s", s_reject_names[why], detail);
}

korch_rc_t korch_session_deserialize(korch_session_t *self, zmsg_t **pframes, korch_msg_t **out,
                                     korch_reject_t *why, korch_err_t *err)
{
    return korch_session_deserialize_raw(self, pframes, out, NULL, NULL, NULL, why, err);
}

korch_rc_t korch_session_deserialize_raw(korch_session_t *self, zmsg_t **pframes, korch_msg_t **out,
                                         zframe_t *raw[4], korch_session_want_fn *want_content, void *arg,
                                         korch_reject_t *why, korch_err_t *err)
{
    zmsg_t *frames = *pframes;
    *pframes = NULL;
    *out = NULL;
    korch_rc_t rc = KORCH_OK;
    korch_msg_t *msg = NULL;
    zframe_t *parts[5] = {0};
    zmsg_t *ids = zmsg_new();
    if (!frames || !ids) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    /* identities..., <IDS|MSG> */
    zframe_t *f;
    bool found = false;
    while ((f = zmsg_pop(frames))) {
        if (zframe_size(f) == DELIM_LEN && memcmp(zframe_data(f), DELIM, DELIM_LEN) == 0) {
            zframe_destroy(&f);
            found = true;
            break;
        }
        zmsg_append(ids, &f);
    }
    if (!found) {
        rc = s_reject(self, KORCH_REJ_NO_DELIMITER, why, err, "no <IDS|MSG> delimiter frame");
        goto out;
    }
    if (zmsg_size(frames) < 5) {
        rc = s_reject(self, KORCH_REJ_SHORT, why, err, "fewer than 5 frames after the delimiter");
        goto out;
    }
    for (int i = 0; i < 5; i++)
        parts[i] = zmsg_pop(frames);
    size_t buffers_total = 0;
    for (f = zmsg_first(frames); f; f = zmsg_next(frames))
        buffers_total += zframe_size(f);
    for (int i = 1; i < 5; i++) {
        size_t lim = i == 4 ? self->lim.max_content : self->lim.max_json_part;
        if (zframe_size(parts[i]) > lim) {
            rc = s_reject(self, KORCH_REJ_TOO_BIG, why, err, "a JSON frame is over its size limit");
            goto out;
        }
    }
    if (buffers_total > self->lim.max_buffers_total) {
        rc = s_reject(self, KORCH_REJ_TOO_BIG, why, err, "binary buffers over their size limit");
        goto out;
    }
    char hex[65] = "";
    if (self->signed_) {
        size_t slen = zframe_size(parts[0]);
        const unsigned char *sig = zframe_data(parts[0]);
        if (slen == 0) {
            rc = s_reject(self, KORCH_REJ_UNSIGNED, why, err, "unsigned message");
            goto out;
        }
        /* Length and alphabet first: never compare buffers of different sizes. */
        if (!s_is_hex64(sig, slen)) {
            rc = s_reject(self, KORCH_REJ_BAD_SIGNATURE, why, err, "signature is not 64 lowercase hex digits");
            goto out;
        }
        memcpy(hex, sig, 64);
        hex[64] = 0;
        if (s_seen(self, hex)) {
            rc = s_reject(self, KORCH_REJ_DUPLICATE, why, err, "duplicate signature (replayed message)");
            goto out;
        }
        const void *data[4];
        size_t lens[4];
        for (int i = 0; i < 4; i++) {
            data[i] = zframe_data(parts[i + 1]);
            lens[i] = zframe_size(parts[i + 1]);
        }
        char check[65];
        korch_session_sign(self, data, lens, check);
        if (check[0] == 0 || CRYPTO_memcmp(check, hex, 64) != 0) {
            rc = s_reject(self, KORCH_REJ_BAD_SIGNATURE, why, err, "invalid signature");
            goto out;
        }
    }
    msg = calloc(1, sizeof *msg);
    if (!msg) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    msg->header = s_parse_object(parts[1]);
    msg->parent_header = s_parse_object(parts[2]);
    msg->metadata = s_parse_object(parts[3]);
    /* content below: the header says whether it may be a huge stream, and
       a relay whether anyone will read it (else it goes on as raw bytes) */
    const char *mt = json_string_value(json_object_get(msg->header, "msg_type"));
    bool need = !want_content || !raw || !msg->header || !msg->parent_header || !msg->metadata ||
                want_content(msg, arg);
    if (need && mt && strcmp(mt, "stream") == 0 && zframe_size(parts[4]) > 65536)
        msg->content = s_parse_stream_bounded((const char *)zframe_data(parts[4]), zframe_size(parts[4]),
                                              self->lim.max_stream_text);
    /* A huge image or HTML bundle: parsing it would cost several times its
       size in memory, and korch would drop it anyway (outputs.h). Its size
       is all korch keeps, to say what was dropped. */
    if (need && mt && zframe_size(parts[4]) > self->lim.max_rich_content &&
        (strcmp(mt, "display_data") == 0 || strcmp(mt, "execute_result") == 0 ||
         strcmp(mt, "update_display_data") == 0))
        msg->content = json_pack("{s:{}, s:{}, s:I}", "data", "metadata", "korch_dropped",
                                 (json_int_t)zframe_size(parts[4]));
    if (need && !msg->content)
        msg->content = s_parse_object(parts[4]);
    if (!msg->header || !msg->parent_header || !msg->metadata || (need && !msg->content)) {
        rc = s_reject(self, KORCH_REJ_BAD_JSON, why, err, "a part is not a JSON object");
        goto out;
    }
    if (!json_is_string(json_object_get(msg->header, "msg_id")) ||
        !json_is_string(json_object_get(msg->header, "msg_type")) ||
        !json_is_string(json_object_get(msg->header, "session"))) {
        rc = s_reject(self, KORCH_REJ_BAD_HEADER, why, err, "header lacks msg_id, msg_type or session");
        goto out;
    }
    /* Only a verified message enters the history (jupyter_client adds before
       verifying, which lets forged digests evict real ones). */
    if (self->signed_)
        s_remember(self, hex);
    msg->identities = ids;
    ids = NULL;
    msg->buffers = frames;
    frames = NULL;
    self->stats.received++;
    *out = msg;
    msg = NULL;
    /* the caller keeps the signed bytes: hand the JSON frames over */
    for (int i = 0; raw && i < 4; i++) {
        raw[i] = parts[i + 1];
        parts[i + 1] = NULL;
    }
out:
    for (int i = 0; i < 5; i++)
        zframe_destroy(&parts[i]);
    zmsg_destroy(&ids);
    zmsg_destroy(&frames);
    if (msg) {
        if (!msg->identities)
            msg->identities = zmsg_new();
        if (!msg->buffers)
            msg->buffers = zmsg_new();
        korch_msg_destroy(&msg);
    }
    return rc;
}
