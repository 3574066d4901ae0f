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
