/*  korch_describe: the user's files as the kernel reads them, for the
 *  model's system prompt. See include/korch/describe.h. */
#include "korch/describe.h"
#include "korch/path.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Python (pandas): at most 2000 rows read for the types; the rows counted
   (a CSV's lines, a sheet's max_row as openpyxl reads it without loading
   the sheet, a parquet's length). */
static const char *s_python =
    "def _korch_describe():\n"
    "    import os, json\n"
    "    out = []\n"
    "    for name in sorted(os.listdir('.')):\n"
    "        if name.startswith('.') or os.path.islink(name) or not os.path.isfile(name):\n"
    "            continue\n"
    "        d = {'name': name, 'bytes': os.path.getsize(name)}\n"
    "        low = name.lower()\n"
    "        try:\n"
    "            import pandas as pd\n"
    "            df = None\n"
    "            if low.endswith(('.csv', '.tsv')):\n"
    "                sep = '\\t' if low.endswith('.tsv') else ','\n"
    "                df = pd.read_csv(name, sep=sep, nrows=2000)\n"
    "                with open(name, 'rb') as f:\n"
    "                    d['rows'] = max(0, sum(1 for _ in f) - 1)\n"
    "            elif low.endswith('.xlsx'):\n"
    "                df = pd.read_excel(name, nrows=2000)\n"
    "                import openpyxl\n"
    "                wb = openpyxl.load_workbook(name, read_only=True)\n"
    "                ws = wb.worksheets[0]\n"
    "                rows = (ws.max_row or 0) - 1 if ws.max_row else None\n"
    "                wb.close()\n"
    "                d['rows'] = rows if rows is not None and rows >= len(df) else len(df)\n"
    "            elif low.endswith('.parquet'):\n"
    "                df = pd.read_parquet(name)\n"
    "                d['rows'] = len(df)\n"
    "            if df is not None:\n"
    "                d['columns'] = {str(c): str(t) for c, t in df.dtypes.items()}\n"
    "        except Exception as e:\n"
    "            d['note'] = 'could not be read as a table: ' + str(e)[:160]\n"
    "        out.append(d)\n"
    "    print(json.dumps(out))\n"
    "_korch_describe()\n"
    "del _korch_describe\n";

/* R (IRkernel; jsonlite is IRkernel's own dependency): read.csv for the
   types, the lines counted in chunks; .xlsx through readxl when the kernel
   has it (Debian's r-cran-readxl). */
static const char *s_r =
    ".korch_describe <- function() {\n"
    "  out <- list()\n"
    "  for (name in sort(list.files('.', all.files = FALSE, no.. = TRUE))) {\n"
    "    info <- file.info(name)\n"
    "    if (is.na(info$isdir) || info$isdir || nzchar(Sys.readlink(name))) next\n"
    "    d <- list(name = name, bytes = info$size)\n"
    "    low <- tolower(name)\n"
    "    why <- tryCatch({\n"
    "      df <- NULL\n"
    "      if (grepl('\\\\.(csv|tsv)$', low)) {\n"
    "        df <- utils::read.csv(name, sep = if (grepl('\\\\.tsv$', low)) '\\t' else ',', nrows = 2000,\n"
    "                              check.names = FALSE)\n"
    "        con <- file(name, 'r')\n"
    "        n <- 0L\n"
    "        repeat { l <- readLines(con, n = 65536L, warn = FALSE); if (!length(l)) break; n <- n + length(l) }\n"
    "        close(con)\n"
    "        d$rows <- max(0L, n - 1L)\n"
    "      } else if (grepl('\\\\.xlsx$', low)) {\n"
    "        if (!requireNamespace('readxl', quietly = TRUE)) stop('the R package readxl is not installed')\n"
    "        df <- as.data.frame(readxl::read_excel(name, n_max = 2000))\n"
    "        d$rows <- nrow(readxl::read_excel(name, range = readxl::cell_cols(1)))\n"
    "      }\n"
    "      if (!is.null(df)) d$columns <- as.list(vapply(df, function(c) class(c)[1], ''))\n"
    "      NULL\n"
    "    }, error = function(e) paste('could not be read as a table:', substr(conditionMessage(e), 1, 160)))\n"
    "    if (!is.null(why)) d$note <- why\n"
    "    out[[length(out) + 1]] <- d\n"
    "  }\n"
    "  cat(jsonlite::toJSON(out, auto_unbox = TRUE), '\\n', sep = '')\n"
    "}\n"
    ".korch_describe()\n"
    "rm(.korch_describe)\n";

const char *korch_describe_code(const char *lang)
{
    if (!lang)
        return NULL;
    if (strcasecmp(lang, "python") == 0)
        return s_python;
    if (strcasecmp(lang, "R") == 0)
        return s_r;
    return NULL;
}

/* s cut to max bytes (at a UTF-8 boundary), control characters as spaces: new string. */
static json_t *s_clean(const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    char *c = malloc(n + 1);
    if (!c)
        return NULL;
    for (size_t i = 0; i < n; i++)
        c[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? ' ' : s[i];
    c[n] = 0;
    json_t *j = json_string(c); /* NULL for bytes that are not UTF-8: dropped */
    free(c);
    return j;
}

json_t *korch_describe_parse(const char *out)
{
    /* its last line that is a JSON array (the code may have been preceded by other output) */
    const char *line = NULL;
    for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (*p == '[')
            line = p;
    json_t *in = line ? json_loadb(line, strcspn(line, "\n"), 0, NULL) : NULL;
    if (!json_is_array(in)) {
        json_decref(in);
        return NULL;
    }
    json_t *res = json_array();
    size_t i;
    json_t *f;
    json_array_foreach(in, i, f) {
        const char *name = json_string_value(json_object_get(f, "name"));
        json_t *bytes = json_object_get(f, "bytes");
        if (json_array_size(res) >= KORCH_DESCRIBE_MAX_FILES)
            break;
        if (!name || strlen(name) > 255 || !korch_path_is_name(name) || name[0] == '.' ||
            !json_is_integer(bytes) || json_integer_value(bytes) < 0)
            continue;
        json_t *n = s_clean(name, 255);
        if (!n || strcmp(json_string_value(n), name) != 0) { /* a name with control characters is not the file's */
            json_decref(n);
            continue;
        }
        json_t *e = json_pack("{s:o, s:O}", "name", n, "bytes", bytes);
        json_t *rows = json_object_get(f, "rows");
        if (json_is_integer(rows) && json_integer_value(rows) >= 0)
            json_object_set(e, "rows", rows);
        json_t *cols = json_object_get(f, "columns"), *out_cols = json_object();
        const char *c;
        json_t *t;
        json_object_foreach(cols, c, t) {
            if (json_object_size(out_cols) >= KORCH_DESCRIBE_MAX_COLUMNS)
                break;
            json_t *cn = s_clean(c, 100), *ct = json_is_string(t) ? s_clean(json_string_value(t), 40) : NULL;
            if (cn && ct)
                json_object_set_new(out_cols, json_string_value(cn), ct);
            else
                json_decref(ct);
            json_decref(cn);
        }
        if (json_object_size(out_cols))
            json_object_set_new(e, "columns", out_cols);
        else
            json_decref(out_cols);
        const char *note = json_string_value(json_object_get(f, "note"));
        if (note)
            json_object_set_new(e, "note", s_clean(note, 200));
        json_array_append_new(res, e);
    }
    json_decref(in);
    return res;
}
