/*  Wire layer: signing, verification, replay protection, rejection of bad
 *  input; fixed vectors from jupyter_client and a live round trip with it. */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"
#include "korch/media.h"
#include "korch/session.h"

#include <stdio.h>
#include <stdlib.h>

static json_t *s_vectors(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/wire/vectors.json", korch_test_root());
    json_t *j = json_load_file(path, 0, NULL);
    CHECK(j != NULL);
    return json_object_get(j, "vectors") ? j : NULL;
}

/* base64 frames (after the delimiter) -> zmsg with a delimiter in front. */
static zmsg_t *s_frames(json_t *b64frames, bool with_delim)
{
    zmsg_t *m = zmsg_new();
    if (with_delim)
        zmsg_addstr(m, "<IDS|MSG>");
    size_t i;
    json_t *f;
    json_array_foreach(b64frames, i, f) {
        size_t len = 0;
        unsigned char *b = korch_b64_decode(json_string_value(f), json_string_length(f), &len);
        zmsg_addmem(m, b, len);
        free(b);
    }
    return m;
}

TEST(wire_vectors_from_jupyter_client)
{
    json_t *root = s_vectors();
    if (!CHECK(root))
        return;
    json_t *vecs = json_object_get(root, "vectors");
    CHECK_GE(json_array_size(vecs), 8);
    size_t i;
    json_t *v;
    json_array_foreach(vecs, i, v) {
        const char *key = json_string_value(json_object_get(v, "key"));
        korch_session_t *s = korch_session_new(key, strlen(key), "t", NULL, NULL);
        /* Same signature over the same bytes. */
        zmsg_t *m = s_frames(json_object_get(v, "frames"), false);
        zframe_t *sig = zmsg_first(m);
        const void *parts[4];
        size_t lens[4];
        zframe_t *f = sig;
        for (int p = 0; p < 4; p++) {
            f = zmsg_next(m);
            parts[p] = zframe_data(f);
            lens[p] = zframe_size(f);
        }
        char hex[65];
        korch_session_sign(s, parts, lens, hex);
        CHECK_STREQ(hex, json_string_value(json_object_get(v, "signature")));
        zmsg_destroy(&m);
        /* And it verifies and parses, buffers included. */
        m = s_frames(json_object_get(v, "frames"), true);
        zmsg_pushstr(m, "some-identity");
        korch_msg_t *msg = NULL;
        korch_err_t err = {0};
        korch_rc_t rc = korch_session_deserialize(s, &m, &msg, NULL, &err);
        if (CHECK_EQ(rc, KORCH_OK)) {
            CHECK_STREQ(korch_msg_type(msg), json_string_value(json_object_get(v, "msg_type")));
            CHECK_STREQ(korch_msg_id(msg), json_string_value(json_object_get(v, "msg_id")));
            CHECK_EQ(zmsg_size(msg->identities), 1);
            CHECK_EQ(zmsg_size(msg->buffers), json_array_size(json_object_get(v, "frames")) - 5);
        } else
            fprintf(stderr, "  vector %s: %s\n", json_string_value(json_object_get(v, "name")), err.msg);
        if (strcmp(json_string_value(json_object_get(v, "name")), "escapes") == 0 && msg) {
            json_t *text = json_object_get(msg->content, "text");
            CHECK_EQ(json_string_length(text), strlen("tab\there \"quoted\" back\\slash ") + 1 + 4);
        }
        korch_msg_destroy(&msg);
        korch_session_destroy(&s);
    }
    json_decref(root);
}

TEST(wire_roundtrip_and_header)
{
    korch_session_t *a = korch_session_new("k3y", 3, "alice", NULL, NULL);
    korch_msg_t *m = korch_msg_new("execute_request", json_pack("{s:s}", "code", "print('h\xc3\xa9')"));
    zmsg_addstr(m->buffers, "buf");
    zmsg_t *frames = korch_session_serialize(a, &m);
    CHECK(m == NULL);
    if (!CHECK(frames))
        return;
    CHECK_EQ(zmsg_size(frames), 7);
    korch_msg_t *back = NULL;
    CHECK_EQ(korch_session_deserialize(a, &frames, &back, NULL, NULL), KORCH_OK);
    CHECK(frames == NULL);
    if (CHECK(back)) {
        CHECK_STREQ(korch_msg_type(back), "execute_request");
        CHECK_STREQ(json_string_value(json_object_get(back->header, "version")), "5.3");
        CHECK_STREQ(json_string_value(json_object_get(back->header, "username")), "alice");
        CHECK_STREQ(json_string_value(json_object_get(back->header, "session")), korch_session_id(a));
        const char *date = json_string_value(json_object_get(back->header, "date"));
        /* 2026-11-29T17:13:39.123456Z */
        CHECK_EQ(strlen(date), 27);
        CHECK_EQ(date[10], 'T');
        CHECK_EQ(date[19], '.');
        CHECK_EQ(date[26], 'Z');
        CHECK_STREQ(json_string_value(json_object_get(back->content, "code")), "print('h\xc3\xa9')");
        CHECK_EQ(zmsg_size(back->buffers), 1);
    }
    korch_msg_destroy(&back);
    korch_session_destroy(&a);
}

/* One valid message's frames (with delimiter), for mutation. */
static zmsg_t *s_valid(korch_session_t *s, const char *text)
{
    korch_msg_t *m = korch_msg_new("stream", json_pack("{s:s, s:s}", "name", "stdout", "text", text));
    return korch_session_serialize(s, &m);
}

static korch_reject_t s_expect_reject(korch_session_t *s, zmsg_t *frames)
{
    korch_msg_t *msg = NULL;
    korch_reject_t why = KORCH_REJ__COUNT;
    korch_err_t err = {0};
    korch_rc_t rc = korch_session_deserialize(s, &frames, &msg, &why, &err);
    CHECK_EQ(rc, KORCH_E_PROTOCOL);
    CHECK(msg == NULL);
    CHECK_CONTAINS(err.msg, "message rejected");
    korch_msg_destroy(&msg);
    return why;
}

/* Replace frame i (0 = first after the delimiter) by str. */
static void s_replace(zmsg_t *m, int i, const char *data, size_t len)
{
    zframe_t *f = zmsg_first(m);
    for (int k = 0; k <= i; k++)
        f = zmsg_next(m);
    zframe_reset(f, data, len);
}

TEST(wire_rejects_bad_input)
{
    korch_session_t *s = korch_session_new("secret", 6, "t", &(korch_session_limits_t){.max_json_part = 4096,
                                                                                        .max_content = 1 << 20}, NULL);
    zmsg_t *m;
    /* missing delimiter */
    m = s_valid(s, "a");
    zframe_t *d = zmsg_first(m);
    zmsg_remove(m, d);
    zframe_destroy(&d);
    CHECK_EQ(s_expect_reject(s, m), KORCH_REJ_NO_DELIMITER);
    /* too few frames */
    m = zmsg_new();
    zmsg_addstr(m, "<IDS|MSG>");
    zmsg_addstr(m, "sig");
    CHECK_EQ(s_expect_reject(s, m), KORCH_REJ_SHORT);
    /* unsigned while a key is set */
    m = s_valid(s, "b");
    s_replace(m, 0, "", 0);
    CHECK_EQ(s_expect_reject(s, m), KORCH_REJ_UNSIGNED);
    /* signature too short, too long, upper case */
    m = s_valid(s, "c");
    s_replace(m, 0, "abcd", 4);
    CHECK_EQ(s_expect_reject(s, m), KORCH_REJ_BAD_SIGNATURE);
    m = s_valid(s, "c2");
    char longsig[200];
    memset(longsig, 'a', sizeof longsig);
    s_replace(m, 0, longsig, sizeof longsig);
    CHECK_EQ(s_expect_reject(s, m), KORCH_REJ_BAD_SIGNATURE);
    m = s_valid(s, "c3");
    zframe_t *sig = zmsg_next(zmsg_first(m) ? m : m);
    char upper[65];
    memcpy(upper, zframe_data(sig), 64);
    for (int i = 0; i < 64; i++)
        if (upper[i] >= 'a' && upper[i] <= 'f')
            upper[i] = (char)(upper[i] - 32);
    s_replace(m, 0, upper, 64);
    CHECK_EQ(s_expect_reject(s, m), KORCH_REJ_BAD_SIGNATURE);
    /* tampered content, correct-looking signature */
    m = s_valid(s, "d");
    s_replace(m, 4, "{\"name\":\"stdout\",\"text\":\"evil\"}", 31);
    CHECK_EQ(s_expect_reject(s, m), KORCH_REJ_BAD_SIGNATURE);
    /* replay: the same frames twice */
    m = s_valid(s, "e");
    zmsg_t *copy = zmsg_dup(m);
    korch_msg_t *ok = NULL;
    CHECK_EQ(korch_session_deserialize(s, &m, &ok, NULL, NULL), KORCH_OK);
    korch_msg_destroy(&ok);
    CHECK_EQ(s_expect_reject(s, copy), KORCH_REJ_DUPLICATE);
    /* invalid JSON, correctly signed (a peer with the key but a bug) */
    korch_session_t *peer = korch_session_new("secret", 6, "p", NULL, NULL);
    const char *parts[4] = {"{\"msg_id\":\"1\",\"msg_type\":\"x\",\"session\":\"s\"}", "{}", "{}", "{not json"};
    size_t lens[4];
    for (int i = 0; i < 4; i++)
        lens[i] = strlen(parts[i]);
    char hex[65];
    korch_session_sign(peer, (const void *const *)parts, lens, hex);
    m = zmsg_new();
    zmsg_addstr(m, "<IDS|MSG>");
    zmsg_addstr(m, hex);
    for (int i = 0; i < 4; i++)
        zmsg_addstr(m, parts[i]);
    CHECK_EQ(s_expect_reject(s, m), KORCH_REJ_BAD_JSON);
    /* JSON that is not an object */
    parts[3] = "[1,2]";
    lens[3] = 5;
    korch_session_sign(peer, (const void *const *)parts, lens, hex);
    m = zmsg_new();
    zmsg_addstr(m, "<IDS|MSG>");
    zmsg_addstr(m, hex);
    for (int i = 0; i < 4; i++)
        zmsg_addstr(m, parts[i]);
    CHECK_EQ(s_expect_reject(s, m), KORCH_REJ_BAD_JSON);
    /* header missing msg_type */
    parts[0] = "{\"msg_id\":\"2\",\"session\":\"s\"}";
    parts[3] = "{}";
    lens[0] = strlen(parts[0]);
    lens[3] = 2;
    korch_session_sign(peer, (const void *const *)parts, lens, hex);
    m = zmsg_new();
    zmsg_addstr(m, "<IDS|MSG>");
    zmsg_addstr(m, hex);
    for (int i = 0; i < 4; i++)
        zmsg_addstr(m, parts[i]);
    CHECK_EQ(s_expect_reject(s, m), KORCH_REJ_BAD_HEADER);
    /* oversized content */
    char *big = malloc(2 << 20);
    memset(big, 'x', 2 << 20);
    big[0] = '{';
    m = s_valid(s, "f");
    s_replace(m, 4, big, 2 << 20);
    free(big);
    CHECK_EQ(s_expect_reject(s, m), KORCH_REJ_TOO_BIG);

    const korch_session_stats_t *st = korch_session_stats(s);
    CHECK_EQ(st->rejected[KORCH_REJ_NO_DELIMITER], 1);
    CHECK_EQ(st->rejected[KORCH_REJ_SHORT], 1);
    CHECK_EQ(st->rejected[KORCH_REJ_UNSIGNED], 1);
    CHECK_EQ(st->rejected[KORCH_REJ_BAD_SIGNATURE], 4);
    CHECK_EQ(st->rejected[KORCH_REJ_DUPLICATE], 1);
    CHECK_EQ(st->rejected[KORCH_REJ_BAD_JSON], 2);
    CHECK_EQ(st->rejected[KORCH_REJ_BAD_HEADER], 1);
    CHECK_EQ(st->rejected[KORCH_REJ_TOO_BIG], 1);
    CHECK_EQ(st->received, 1);
    korch_session_destroy(&peer);
    korch_session_destroy(&s);
}

TEST(wire_unsigned_session)
{
    korch_session_t *s = korch_session_new(NULL, 0, "t", NULL, NULL);
    zmsg_t *m = s_valid(s, "x");
    zframe_t *sig = zmsg_next(zmsg_first(m) ? m : m);
    CHECK_EQ(zframe_size(sig), 0);
    korch_msg_t *msg = NULL;
    CHECK_EQ(korch_session_deserialize(s, &m, &msg, NULL, NULL), KORCH_OK);
    korch_msg_destroy(&msg);
    korch_session_destroy(&s);
}

TEST(wire_digest_history_is_bounded)
{
    korch_session_t *s = korch_session_new("k", 1, "t", &(korch_session_limits_t){.digest_history = 8}, NULL);
    zmsg_t *first = s_valid(s, "first");
    zmsg_t *again = zmsg_dup(first);
    korch_msg_t *msg = NULL;
    CHECK_EQ(korch_session_deserialize(s, &first, &msg, NULL, NULL), KORCH_OK);
    korch_msg_destroy(&msg);
    for (int i = 0; i < 8; i++) {
        zmsg_t *m = s_valid(s, "filler");
        CHECK_EQ(korch_session_deserialize(s, &m, &msg, NULL, NULL), KORCH_OK);
        korch_msg_destroy(&msg);
    }
    /* The first digest was evicted: remembered history is bounded at 8. */
    CHECK_EQ(korch_session_deserialize(s, &again, &msg, NULL, NULL), KORCH_OK);
    korch_msg_destroy(&msg);
    korch_session_destroy(&s);
}

/* The history at scale: through its growth, wrap-around and evictions
   (with the index's deletions) every digest among the last N is refused
   and every older one passes again. */
TEST(wire_digest_history_refuses_exactly_the_last_n)
{
    enum { N = 300, SENT = 1000 };
    korch_session_t *s = korch_session_new("k", 1, "t", &(korch_session_limits_t){.digest_history = N}, NULL);
    zmsg_t *copies[SENT];
    korch_msg_t *msg = NULL;
    for (int i = 0; i < SENT; i++) {
        char text[32];
        snprintf(text, sizeof text, "m%d", i);
        zmsg_t *m = s_valid(s, text);
        copies[i] = zmsg_dup(m);
        CHECK_EQ(korch_session_deserialize(s, &m, &msg, NULL, NULL), KORCH_OK);
        korch_msg_destroy(&msg);
    }
    int refused = 0, passed = 0;
    for (int i = SENT - 1; i >= SENT - N; i--) { /* newest first: none of these evicts another of them */
        korch_reject_t why = KORCH_REJ__COUNT;
        if (korch_session_deserialize(s, &copies[i], &msg, &why, NULL) != KORCH_OK && why == KORCH_REJ_DUPLICATE)
            refused++;
        korch_msg_destroy(&msg);
        zmsg_destroy(&copies[i]);
    }
    for (int i = 0; i < SENT - N; i++) { /* evicted long ago: good messages again */
        if (korch_session_deserialize(s, &copies[i], &msg, NULL, NULL) == KORCH_OK)
            passed++;
        korch_msg_destroy(&msg);
        zmsg_destroy(&copies[i]);
    }
    CHECK_EQ(refused, N);
    CHECK_EQ(passed, SENT - N);
    korch_session_destroy(&s);
}

/* Random mutations of valid messages: never a crash, never a tampered accept. */
TEST(wire_mutations_never_crash)
{
    korch_session_t *s = korch_session_new("fuzzkey", 7, "t", NULL, NULL);
    srand(1234);
    int accepted = 0;
    for (int iter = 0; iter < 3000; iter++) {
        zmsg_t *m = s_valid(s, "payload for mutation");
        int nframes = (int)zmsg_size(m);
        int target = rand() % nframes;
        zframe_t *f = zmsg_first(m);
        for (int i = 0; i < target; i++)
            f = zmsg_next(m);
        int op = rand() % 4;
        if (op == 0 && zframe_size(f) > 0) {
            ((unsigned char *)zframe_data(f))[rand() % zframe_size(f)] ^= (unsigned char)(1 + rand() % 255);
        } else if (op == 1) {
            zframe_t *half = zframe_new(zframe_data(f), zframe_size(f) / 2); /* reset frees the old data */
            zframe_reset(f, zframe_data(half), zframe_size(half));
            zframe_destroy(&half);
        } else if (op == 2) {
            zmsg_remove(m, f);
            zframe_destroy(&f);
        } else {
            zmsg_addmem(m, "\xff\xfe", 2); /* an extra buffer frame: still valid */
        }
        korch_msg_t *msg = NULL;
        korch_rc_t rc = korch_session_deserialize(s, &m, &msg, NULL, NULL);
        if (rc == KORCH_OK) {
            accepted++;
            /* Only an appended buffer (or a no-op flip of an empty frame) may pass. */
            CHECK_STREQ(json_string_value(json_object_get(msg->content, "text")), "payload for mutation");
        }
        korch_msg_destroy(&msg);
    }
    CHECK_GT(accepted, 0);
    CHECK_LT(accepted, 3000);
    korch_session_destroy(&s);
}

static char *s_frames_line(zmsg_t *m)
{
    json_t *arr = json_array();
    for (zframe_t *f = zmsg_first(m); f; f = zmsg_next(m)) {
        char *b = korch_b64_encode(zframe_data(f), zframe_size(f));
        json_array_append_new(arr, json_string(b));
        free(b);
    }
    char *line = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    return line;
}

TEST(wire_live_roundtrip_with_jupyter_client)
{
    const char *key = "6f1d8c2a9e0b4d7f8a3c5e1b2d4f6a8c";
    korch_session_t *s = korch_session_new(key, strlen(key), "korch", NULL, NULL);
    /* korch signs, jupyter_client verifies: 50 messages, one tampered, one replayed. */
    size_t cap = 1 << 20, len = 0;
    char *input = calloc(1, cap);
    zmsg_t *replay = NULL;
    for (int i = 0; i < 50; i++) {
        char text[64];
        snprintf(text, sizeof text, "korch says %d \xe2\x98\x83", i);
        korch_msg_t *m = korch_msg_new("stream", json_pack("{s:s, s:s}", "name", "stdout", "text", text));
        if (i == 7)
            zmsg_addmem(m->buffers, "\x00\x01", 2);
        zmsg_t *frames = korch_session_serialize(s, &m);
        if (i == 10) {
            zframe_t *c = zmsg_last(frames);
            zframe_reset(c, "{\"name\":\"stdout\",\"text\":\"tampered\"}", 35);
        }
        if (i == 20)
            replay = zmsg_dup(frames);
        char *line = s_frames_line(frames);
        len += (size_t)snprintf(input + len, cap - len, "%s\n", line);
        free(line);
        zmsg_destroy(&frames);
    }
    char *line = s_frames_line(replay);
    len += (size_t)snprintf(input + len, cap - len, "%s\n", line);
    free(line);
    zmsg_destroy(&replay);
    char *out = NULL;
    const char *argv[] = {"/usr/bin/python3", "tests/peers/session_peer.py", "verify", key, NULL};
    CHECK_EQ(korch_test_run(argv, input, &out, NULL, 60), 0);
    int i = 0, ok = 0;
    for (char *p = out, *save = NULL, *l = strtok_r(p, "\n", &save); l; l = strtok_r(NULL, "\n", &save), i++) {
        json_t *r = json_loads(l, 0, NULL);
        bool good = json_is_true(json_object_get(r, "ok"));
        if (i == 10 || i == 50) {
            CHECK(!good); /* tampered, replayed */
            CHECK_CONTAINS(json_string_value(json_object_get(r, "error")), i == 10 ? "Invalid Signature" : "Duplicate");
        } else if (CHECK(good)) {
            ok++;
            char want[64];
            snprintf(want, sizeof want, "korch says %d \xe2\x98\x83", i);
            CHECK_STREQ(json_string_value(json_object_get(json_object_get(r, "content"), "text")), want);
            if (i == 7)
                CHECK_EQ(json_array_size(json_object_get(r, "buffers")), 1);
        }
        json_decref(r);
    }
    CHECK_EQ(i, 51);
    CHECK_EQ(ok, 49);
    free(out);
    free(input);

    /* jupyter_client signs, korch verifies. */
    const char *argv2[] = {"/usr/bin/python3", "tests/peers/session_peer.py", "sign", key, "30", NULL};
    CHECK_EQ(korch_test_run(argv2, NULL, &out, NULL, 60), 0);
    i = 0;
    for (char *p = out, *save = NULL, *l = strtok_r(p, "\n", &save); l; l = strtok_r(NULL, "\n", &save), i++) {
        json_t *arr = json_loads(l, 0, NULL);
        zmsg_t *m = zmsg_new();
        size_t k;
        json_t *f;
        json_array_foreach(arr, k, f) {
            size_t blen;
            unsigned char *b = korch_b64_decode(json_string_value(f), json_string_length(f), &blen);
            zmsg_addmem(m, b, blen);
            free(b);
        }
        json_decref(arr);
        korch_msg_t *msg = NULL;
        korch_err_t err = {0};
        if (CHECK_EQ(korch_session_deserialize(s, &m, &msg, NULL, &err), KORCH_OK)) {
            char want[64];
            snprintf(want, sizeof want, "line %d \xc3\xa9\xe2\x98\x83\n", i);
            CHECK_STREQ(json_string_value(json_object_get(msg->content, "text")), want);
            CHECK_EQ(zmsg_size(msg->identities), (size_t)(i % 2));
            CHECK_EQ(zmsg_size(msg->buffers), (size_t)(i % 3 == 0));
        } else
            fprintf(stderr, "  %s\n", err.msg);
        korch_msg_destroy(&msg);
    }
    CHECK_EQ(i, 30);
    free(out);
    korch_session_destroy(&s);
}

/* Large stream messages are decoded straight from the frame, bounded; the
   result must equal jansson's for what is kept. */
TEST(wire_large_stream_bounded_parse)
{
    korch_session_t *tx = korch_session_new("k", 1, "t", NULL, NULL);
    korch_session_t *rx = korch_session_new("k", 1, "t", &(korch_session_limits_t){.max_stream_text = 1000}, NULL);
    /* 60000 pieces (over the 64 KiB where the bounded parser takes over)
       mixing ASCII runs, escapes, 2/3/4-byte UTF-8 and control characters */
    size_t cap = 512 * 1024, n = 0;
    char *text = malloc(cap);
    const char *pieces[] = {"abc", "\"", "\\", "\n", "\t", "\xc3\xa9", "\xe2\x98\x83", "\xf0\x9f\x98\x80", "/", "\x01"};
    for (int i = 0; i < 60000; i++) {
        const char *p = pieces[i % 10];
        size_t l = strlen(p);
        memcpy(text + n, p, l);
        n += l;
    }
    korch_msg_t *m = korch_msg_new("stream", json_pack("{s:s, s:s%}", "name", "stdout", "text", text, n));
    zmsg_t *frames = korch_session_serialize(tx, &m);
    korch_msg_t *back = NULL;
    if (CHECK_EQ(korch_session_deserialize(rx, &frames, &back, NULL, NULL), KORCH_OK)) {
        json_t *t = json_object_get(back->content, "text");
        size_t kept = json_string_length(t);
        CHECK_LE(kept, 1000);
        CHECK_GT(kept, 990);
        CHECK(memcmp(json_string_value(t), text, kept) == 0);
        CHECK_EQ((size_t)json_integer_value(json_object_get(back->content, "korch_dropped")), n - kept);
        CHECK_STREQ(json_string_value(json_object_get(back->content, "name")), "stdout");
    }
    korch_msg_destroy(&back);
    free(text);
    korch_session_destroy(&tx);
    korch_session_destroy(&rx);
}
