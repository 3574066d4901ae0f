/*  nbformat outputs from IOPub content: merging, clearing, display updates,
 *  memory limits. */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"
#include "korch/outputs.h"

static korch_output_event_t s_apply(korch_outputs_t *o, const char *type, const char *content_json)
{
    json_t *c = json_loads(content_json, 0, NULL);
    CHECK(c != NULL);
    json_t *out;
    size_t idx;
    korch_output_event_t ev = korch_outputs_apply(o, type, c, &out, &idx);
    json_decref(c);
    return ev;
}

static const char *s_field(korch_outputs_t *o, size_t i, const char *key)
{
    return json_string_value(json_object_get(json_array_get(korch_outputs_json(o), i), key));
}

TEST(outputs_streams_merge_by_name)
{
    korch_outputs_t *o = korch_outputs_new(0, 0);
    CHECK_EQ(s_apply(o, "stream", "{\"name\":\"stdout\",\"text\":\"a\"}"), KORCH_OUTPUT_NEW);
    CHECK_EQ(s_apply(o, "stream", "{\"name\":\"stdout\",\"text\":\"b\\n\"}"), KORCH_OUTPUT_STREAM);
    CHECK_EQ(s_apply(o, "stream", "{\"name\":\"stderr\",\"text\":\"E\"}"), KORCH_OUTPUT_NEW);
    CHECK_EQ(s_apply(o, "stream", "{\"name\":\"stdout\",\"text\":\"c\"}"), KORCH_OUTPUT_NEW);
    CHECK_EQ(s_apply(o, "status", "{\"execution_state\":\"idle\"}"), KORCH_OUTPUT_NONE);
    CHECK_EQ(json_array_size(korch_outputs_json(o)), 3);
    CHECK_STREQ(s_field(o, 0, "text"), "ab\n");
    CHECK_STREQ(s_field(o, 1, "text"), "E");
    CHECK_STREQ(s_field(o, 2, "text"), "c");
    CHECK_STREQ(s_field(o, 0, "output_type"), "stream");
    korch_outputs_destroy(&o);
}

TEST(outputs_results_errors_and_bundles)
{
    korch_outputs_t *o = korch_outputs_new(0, 0);
    s_apply(o, "execute_result", "{\"execution_count\":4,\"data\":{\"text/plain\":\"42\"},\"metadata\":{}}");
    s_apply(o, "display_data",
            "{\"data\":{\"image/png\":\"iVBO\",\"text/plain\":\"<Figure>\"},\"metadata\":{\"image/png\":{\"width\":3}}}");
    s_apply(o, "error", "{\"ename\":\"ValueError\",\"evalue\":\"bad\",\"traceback\":[\"l1\",\"l2\"]}");
    json_t *outs = korch_outputs_json(o);
    CHECK_EQ(json_array_size(outs), 3);
    CHECK_EQ(json_integer_value(json_object_get(json_array_get(outs, 0), "execution_count")), 4);
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(json_array_get(outs, 1), "data"), "image/png")),
                "iVBO");
    CHECK_EQ(json_integer_value(json_object_get(
                 json_object_get(json_object_get(json_array_get(outs, 1), "metadata"), "image/png"), "width")),
             3);
    CHECK_STREQ(s_field(o, 2, "ename"), "ValueError");
    CHECK_EQ(json_array_size(json_object_get(json_array_get(outs, 2), "traceback")), 2);
    /* display outputs carry no "transient" in nbformat */
    CHECK(json_object_get(json_array_get(outs, 1), "transient") == NULL);
    korch_outputs_destroy(&o);
}

TEST(outputs_clear_output_and_wait)
{
    korch_outputs_t *o = korch_outputs_new(0, 0);
    s_apply(o, "stream", "{\"name\":\"stdout\",\"text\":\"old\"}");
    CHECK_EQ(s_apply(o, "clear_output", "{\"wait\":false}"), KORCH_OUTPUT_CLEAR);
    CHECK_EQ(json_array_size(korch_outputs_json(o)), 0);
    s_apply(o, "stream", "{\"name\":\"stdout\",\"text\":\"frame1\"}");
    CHECK_EQ(s_apply(o, "clear_output", "{\"wait\":true}"), KORCH_OUTPUT_NONE);
    CHECK_EQ(json_array_size(korch_outputs_json(o)), 1); /* kept until the next output */
    s_apply(o, "stream", "{\"name\":\"stdout\",\"text\":\"frame2\"}");
    CHECK_EQ(json_array_size(korch_outputs_json(o)), 1);
    CHECK_STREQ(s_field(o, 0, "text"), "frame2");
    korch_outputs_destroy(&o);
}

TEST(outputs_update_display_data)
{
    korch_outputs_t *o = korch_outputs_new(0, 0);
    s_apply(o, "display_data", "{\"data\":{\"text/plain\":\"0%\"},\"metadata\":{},\"transient\":{\"display_id\":\"p\"}}");
    s_apply(o, "stream", "{\"name\":\"stdout\",\"text\":\"between\"}");
    s_apply(o, "display_data", "{\"data\":{\"text/plain\":\"0%\"},\"metadata\":{},\"transient\":{\"display_id\":\"p\"}}");
    CHECK_EQ(s_apply(o, "update_display_data",
                     "{\"data\":{\"text/plain\":\"100%\"},\"metadata\":{},\"transient\":{\"display_id\":\"p\"}}"),
             KORCH_OUTPUT_UPDATE);
    CHECK_EQ(s_apply(o, "update_display_data",
                     "{\"data\":{\"text/plain\":\"x\"},\"metadata\":{},\"transient\":{\"display_id\":\"other\"}}"),
             KORCH_OUTPUT_NONE);
    json_t *outs = korch_outputs_json(o);
    CHECK_EQ(json_array_size(outs), 3);
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(json_array_get(outs, 0), "data"), "text/plain")),
                "100%");
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(json_array_get(outs, 2), "data"), "text/plain")),
                "100%");
    CHECK_STREQ(s_field(o, 1, "text"), "between");
    korch_outputs_destroy(&o);
}

TEST(outputs_memory_is_bounded)
{
    korch_outputs_t *o = korch_outputs_new(1000, 5);
    char content[700];
    char chunk[601];
    memset(chunk, 'x', 600);
    chunk[600] = 0;
    snprintf(content, sizeof content, "{\"name\":\"stdout\",\"text\":\"%s\"}", chunk);
    for (int i = 0; i < 10; i++)
        s_apply(o, "stream", content);
    CHECK_EQ(korch_outputs_dropped_bytes(o), 5000);
    for (int i = 0; i < 10; i++)
        s_apply(o, "display_data", "{\"data\":{\"text/plain\":\"d\"},\"metadata\":{}}");
    CHECK_EQ(korch_outputs_dropped_outputs(o), 6);
    korch_outputs_finish(o);
    korch_outputs_finish(o);
    json_t *outs = korch_outputs_json(o);
    CHECK_EQ(json_array_size(outs), 7);
    CHECK_EQ(strlen(s_field(o, 0, "text")), 1000);
    CHECK_CONTAINS(s_field(o, 5, "text"), "5000 more bytes");
    CHECK_CONTAINS(s_field(o, 6, "text"), "6 more outputs");
    korch_outputs_destroy(&o);
}

TEST(outputs_cut_keeps_utf8_whole)
{
    korch_outputs_t *o = korch_outputs_new(4, 0);
    /* "aé☃": 1 + 2 + 3 bytes; a cut at 4 would split the snowman */
    s_apply(o, "stream", "{\"name\":\"stdout\",\"text\":\"a\\u00e9\\u2603\"}");
    CHECK_STREQ(s_field(o, 0, "text"), "a\xc3\xa9");
    CHECK_EQ(korch_outputs_dropped_bytes(o), 3);
    korch_outputs_destroy(&o);
}
