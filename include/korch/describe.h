/*  What the agent tells the model about the user's files: for each file in
 *  the kernel's working directory its size and, for a table (.csv, .tsv,
 *  .xlsx, .parquet), its row count and column names with their types, as
 *  the kernel's own language reads them (pandas in Python, read.csv and
 *  readxl in R).
 *
 *  The kernel runs korch_describe_code and prints one JSON line; that line
 *  is the kernel's, and the kernel may be hostile: korch_describe_parse
 *  keeps only well-formed entries, plain names, bounded counts and strings
 *  without control characters (they go into the model's system prompt).
 *
 *  Stateless; any thread.
 */
#ifndef KORCH_DESCRIBE_H
#define KORCH_DESCRIBE_H

#include <jansson.h>

#define KORCH_DESCRIBE_MAX_FILES 200    /* entries kept */
#define KORCH_DESCRIBE_MAX_COLUMNS 200  /* columns kept per file */

/* The code that describes the files of the kernel's current directory in
   language lang (the kernel's language_info.name, any case: "python",
   "R"), printing one JSON line; NULL when korch has none for that language
   (the agent then lists names and sizes only). Static storage. */
const char *korch_describe_code(const char *lang);

/* The kernel's stdout after that code, checked: a new array of
   {name, bytes, rows?, columns?: {name: type}, note?}, or NULL when the
   output holds no such JSON array. */
json_t *korch_describe_parse(const char *out);

#endif
