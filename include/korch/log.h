/*  Logging to stderr, level-checked before any argument is evaluated.
 *
 *  KORCH_LOG=debug|info|warn|error|off picks the level (default warn).
 */
#ifndef KORCH_LOG_H
#define KORCH_LOG_H

typedef enum { KORCH_LOG_DEBUG, KORCH_LOG_INFO, KORCH_LOG_WARN, KORCH_LOG_ERROR, KORCH_LOG_OFF } korch_log_level_t;

extern korch_log_level_t korch_log_level;

/* Read KORCH_LOG once; safe to call again. */
void korch_log_init(void);

void korch_log_write(korch_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define korch_log(level, ...) \
    do { if ((level) >= korch_log_level) korch_log_write((level), __VA_ARGS__); } while (0)
#define korch_debug(...) korch_log(KORCH_LOG_DEBUG, __VA_ARGS__)
#define korch_info(...)  korch_log(KORCH_LOG_INFO, __VA_ARGS__)
#define korch_warn(...)  korch_log(KORCH_LOG_WARN, __VA_ARGS__)
#define korch_error(...) korch_log(KORCH_LOG_ERROR, __VA_ARGS__)

#endif
