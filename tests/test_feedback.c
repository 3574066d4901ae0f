/*  What the model is shown of an execution, and the session notebook. */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"
#include "korch/feedback.h"
#include "korch/media.h"
#include "korch/notebook.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

TEST(feedback_truncates_head_and_tail)
{
    char *big = malloc(20001);
    for (int i = 0; i < 20000; i++)
        big[i] = (char)('a' + i % 26);
    big[20000] = 0;
    memcpy(big, "HEAD", 4);
    memcpy(big + 19996, "TAIL", 4);
    char *cut = korch_truncate_middle(big, 20000, 1000);
    CHECK_LE(strlen(cut), 1000);
    CHECK(strncmp(cut, "HEAD", 4) == 0);
    CHECK_CONTAINS(cut, "characters cut ...]");
    CHECK(strcmp(cut + strlen(cut) - 4, "TAIL") == 0);
    free(cut);
    cut = korch_truncate_middle("short", 5, 1000);
    CHECK_STREQ(cut, "short");
    free(cut);
    free(big);
}

static json_t *s_outputs(const char *json) { return json_loads(json, 0, NULL); }

TEST(feedback_text_errors_and_charts)
{
    /* a 1x1 PNG */
    const char *png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
    char json[2048];
    snprintf(json, sizeof json,
             "[{\"output_type\":\"stream\",\"name\":\"stdout\",\"text\":\"rows: 120\\n\"},"
             "{\"output_type\":\"display_data\",\"data\":{\"image/png\":\"%s\",\"text/plain\":\"<Figure size 640x480>\"},"
             "\"metadata\":{}},"
             "{\"output_type\":\"execute_result\",\"execution_count\":3,\"data\":{\"text/plain\":\"42\"},\"metadata\":{}},"
             "{\"output_type\":\"error\",\"ename\":\"KeyError\",\"evalue\":\"'x'\","
             "\"traceback\":[\"\\u001b[0;31mKeyError\\u001b[0m: 'x'\"]}]",
             png);
    json_t *outs = s_outputs(json);
    korch_exec_result_t r = {.status = KORCH_EXEC_ERROR, .outputs = outs};
    char dir[] = "/tmp/korch-fb-XXXXXX";
    CHECK(mkdtemp(dir));
    int counter = 4;
    korch_feedback_opts_t o = {.max_chars = 4000, .vision = true, .figures_dir = dir, .figure_counter = &counter};
    char *text = NULL;
    json_t *images = NULL, *saved = NULL;
    korch_feedback_build(&r, &o, &text, &images, &saved);
    CHECK_CONTAINS(text, "rows: 120\n");
    CHECK_CONTAINS(text, "[chart 5: image/png 1x1 saved as fig-5.png, attached]");
    CHECK(strstr(text, "<Figure") == NULL);
    CHECK_CONTAINS(text, "42\n");
    CHECK_CONTAINS(text, "KeyError: 'x'");
    CHECK(strstr(text, "\x1b[") == NULL);
    CHECK_CONTAINS(text, "raised an error");
    CHECK_EQ(json_array_size(images), 1);
    CHECK_STREQ(json_string_value(json_object_get(json_array_get(images, 0), "mime")), "image/png");
    CHECK_EQ(json_array_size(saved), 1);
    CHECK_EQ(counter, 5);
    char path[300];
    snprintf(path, sizeof path, "%s/fig-5.png", dir);
    size_t len = 0;
    char *bytes = korch_read_file(path, 1 << 20, &len, NULL);
    CHECK(bytes && len > 50 && memcmp(bytes, "\x89PNG", 4) == 0);
    free(bytes);
    free(text);
    json_decref(images);
    json_decref(saved);
    /* without vision: no image, a line with the file name */
    o.vision = false;
    korch_feedback_build(&r, &o, &text, &images, &saved);
    CHECK_CONTAINS(text, "[chart 6: image/png 1x1 saved as fig-6.png]");
    CHECK_EQ(json_array_size(images), 0);
    free(text);
    json_decref(images);
    json_decref(saved);
    /* died */
    korch_exec_result_t d = {.status = KORCH_EXEC_DIED, .outputs = json_array(), .restarted = true};
    snprintf(d.detail, sizeof d.detail, "kernel died: out of memory (limit 1 GiB)");
    korch_feedback_build(&d, &o, &text, &images, &saved);
    CHECK_CONTAINS(text, "kernel died: out of memory (limit 1 GiB)");
    CHECK_CONTAINS(text, "variables are lost");
    free(text);
    json_decref(images);
    json_decref(saved);
    json_decref(d.outputs);
    json_decref(outs);
    snprintf(path, sizeof path, "rm -rf %s", dir);
    CHECK_EQ(system(path), 0);
}

TEST(notebook_validates_with_nbformat)
{
    korch_notebook_t *nb = korch_notebook_new("python3", "Python 3", "python");
    korch_notebook_add_markdown(nb, "**User:** which region?");
    json_t *outs = json_loads("[{\"output_type\":\"stream\",\"name\":\"stdout\",\"text\":\"hi\\n\"},"
                              "{\"output_type\":\"execute_result\",\"execution_count\":1,\"data\":{\"text/plain\":\"1\"},"
                              "\"metadata\":{}}]",
                              0, NULL);
    korch_notebook_add_code(nb, "print('hi')\n1", 1, outs);
    korch_notebook_add_code(nb, "x", -1, NULL);
    korch_notebook_add_markdown(nb, "East.");
    char path[] = "/tmp/korch-nb-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK_EQ(korch_notebook_write(nb, path, NULL), KORCH_OK);
    char code[512], *out = NULL;
    snprintf(code, sizeof code,
             "import nbformat\nnb = nbformat.read('%s', as_version=4)\nnbformat.validate(nb)\n"
             "print(len(nb.cells), nb.cells[1].outputs[0].text, nb.nbformat_minor)",
             path);
    const char *argv[] = {"/usr/bin/python3", "-c", code, NULL};
    CHECK_EQ(korch_test_run(argv, NULL, &out, NULL, 60), 0);
    CHECK_STREQ(out, "4 hi\n 5\n");
    free(out);
    unlink(path);
    json_decref(outs);
    korch_notebook_destroy(&nb);
}

/* Kept on disk (an agent session's notebook): each write moves the new
   cells out of memory and copies the earlier ones from the file, and the
   file is byte for byte what one dump of the whole document gives, after
   every write; the whole document comes back from korch_notebook_doc; a
   copy to another path and a file changed behind its back lose nothing. */
TEST(notebook_on_disk_same_bytes_cells_out_of_memory)
{
    char dir[] = "/tmp/korch-nbdisk-XXXXXX";
    if (!CHECK(mkdtemp(dir)))
        return;
    char path[64], copy[64];
    snprintf(path, sizeof path, "%s/notebook.ipynb", dir);
    snprintf(copy, sizeof copy, "%s/copy.ipynb", dir);
    korch_notebook_t *nb = korch_notebook_new("python3", "Python 3", "python");
    korch_notebook_keep_on_disk(nb, path);
    CHECK_EQ(korch_notebook_write(nb, path, NULL), KORCH_OK); /* no cells yet: "cells": [] */
    for (int step = 0; step < 6; step++) {
        char text[64];
        snprintf(text, sizeof text, "**User:** question %d \"quoted\" \xc3\xa9", step);
        korch_notebook_add_markdown(nb, text);
        json_t *outs = json_pack("[{s:s, s:s, s:s}]", "output_type", "stream", "name", "stdout", "text", "a\nb\n");
        korch_notebook_add_code_meta(nb, "print('a')\nprint('b')", step + 1, outs,
                                     korch_notebook_cell_meta("ok", NULL, step + 1, 1));
        json_decref(outs);
        CHECK(korch_notebook_last_meta(nb) != NULL);
        json_object_set_new(korch_notebook_meta(nb), "step", json_integer(step));
        json_t *doc = korch_notebook_doc(nb);
        CHECK_EQ(json_array_size(json_object_get(doc, "cells")), (size_t)(2 * step + 2));
        CHECK_EQ(korch_notebook_write(nb, path, NULL), KORCH_OK);
        CHECK(korch_notebook_last_meta(nb) == NULL); /* written: out of memory */
        char *want = json_dumps(doc, JSON_INDENT(1) | JSON_ENSURE_ASCII);
        size_t len = 0;
        char *got = korch_read_file(path, 1 << 20, &len, NULL);
        CHECK_STREQ(got, want);
        free(got);
        free(want);
        json_decref(doc);
    }
    /* another path: a whole copy; the session's file is still the one kept */
    korch_notebook_add_markdown(nb, "East.");
    CHECK_EQ(korch_notebook_write(nb, copy, NULL), KORCH_OK);
    json_t *c = json_load_file(copy, 0, NULL);
    CHECK_EQ(json_array_size(json_object_get(c, "cells")), 13);
    json_decref(c);
    CHECK(korch_notebook_last_meta(nb) != NULL); /* not moved out by a copy */
    /* the file rewritten behind its back (same cells, other bytes): read, not copied blindly */
    json_t *d = json_load_file(path, 0, NULL);
    CHECK_EQ(json_dump_file(d, path, JSON_COMPACT), 0);
    json_decref(d);
    CHECK_EQ(korch_notebook_write(nb, path, NULL), KORCH_OK);
    json_t *after = json_load_file(path, 0, NULL);
    CHECK_EQ(json_array_size(json_object_get(after, "cells")), 13);
    CHECK_STREQ(json_string_value(json_object_get(json_array_get(json_object_get(after, "cells"), 12), "source")),
                "East.");
    json_decref(after);
    korch_notebook_destroy(&nb);
    char rm[96];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    CHECK_EQ(system(rm), 0);
}
