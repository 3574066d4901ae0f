/*  Numbers with receipts: each number in a final answer tied to the kernel
 *  output that printed it, or flagged as "not computed by the kernel".
 *
 *  Evidence is what the kernel printed (stream text, text/plain results),
 *  added output by output with where it came from. A number of the answer
 *  matches a printed one when
 *    exact      the values are equal (8451 = 8,451.00 = 8.451e3);
 *    rounded    the answer is the printed value rounded to the answer's own
 *               precision (8,451.37 -> "8,451", "8.45k", "8,500": trailing
 *               zeros of an integer of 2+ significant digits round too);
 *    percent    the answer is a percentage of a printed ratio (0.2954 ->
 *               "29.5%"), exact or rounded;
 *    magnitude  the answer gives without a sign what was printed negative
 *               ("fell by 3.2" for -3.2).
 *  Numbers the user's question holds are "given". Thousands separators
 *  (1,234 and 1 234 with a (narrow) no-break space), negative numbers (- and
 *  U+2212), scientific notation (1.2e-05) and k / M / bn / thousand /
 *  million / billion suffixes are read; digits inside identifiers (fig-1,
 *  x2, float64) are not numbers. The best form wins (for "30%", a printed
 *  percentage or ratio before a bare 30), then the latest output.
 *
 *  Bounded: at most KORCH_RECEIPTS_MAX numbers are kept (the oldest tenth
 *  goes when it is reached), and each text is read up to 1 MiB. Once some
 *  were dropped, a number that matches none says so (its note names the cap
 *  and evidence_dropped counts them) instead of "not computed by the
 *  kernel". Not thread-safe.
 */
#ifndef KORCH_RECEIPTS_H
#define KORCH_RECEIPTS_H

#include <stddef.h>
#include <jansson.h>

#define KORCH_RECEIPTS_MAX 50000

typedef struct korch_receipts korch_receipts_t;

korch_receipts_t *korch_receipts_new(void);
void korch_receipts_destroy(korch_receipts_t **r);

/* Evidence: text (len bytes) printed by the kernel; where (stolen; may be
   NULL) says where, e.g. {"turn": 1, "step": 3, "execution_count": 3,
   "output_index": 0}, and is copied into each receipt that cites it. */
void korch_receipts_add(korch_receipts_t *r, const char *text, size_t len, json_t *where);

/* The same for every text output of an nbformat outputs array (borrowed):
   stream text and text/plain of results and displays; where (stolen) gets
   "output_index" per output. */
void korch_receipts_add_outputs(korch_receipts_t *r, json_t *outputs, json_t *where);

/* Numbers the user gave (their question): matched as "given". */
void korch_receipts_given(korch_receipts_t *r, const char *text);

/* Forget the given numbers (a new question). */
void korch_receipts_given_clear(korch_receipts_t *r);

/* The receipts of answer: a new array, one object per number in order,
   {text, start, end (code points in answer), value, found, form?
   ("exact" | "rounded" | "percent" | "magnitude" | "given"), printed?
   (the printed text it matches), ...where} or, not found, found: false and
   note "not computed by the kernel" (or, once the cap dropped evidence,
   a note saying so and evidence_dropped: N). */
json_t *korch_receipts_match(const korch_receipts_t *r, const char *answer);

/* Counts of a receipts array: how many numbers, how many not found. */
void korch_receipts_count(json_t *receipts, size_t *numbers, size_t *unbacked);

#endif
