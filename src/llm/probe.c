/*  Is the model's endpoint there at all? A connect (and TLS handshake) to
 *  its base URL, no request: cheap enough to do before a kernel starts and
 *  a session dir is made, so a wrong OPENAI_BASE_URL is one clear error
 *  instead of an empty session left behind. */
#include "provider.h"

#include <stdio.h>
#include <string.h>

#define PROBE_TIMEOUT_MS 5000

korch_rc_t korch_llm_probe(korch_llm_t *llm, korch_err_t *err)
{
    if (!llm || !llm->base_url || !*llm->base_url) /* replay: no endpoint */
        return KORCH_OK;
    CURL *c = curl_easy_init();
    if (!c)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, llm->base_url);
    curl_easy_setopt(c, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    long ct = llm->opts.connect_timeout_ms > 0 && llm->opts.connect_timeout_ms < PROBE_TIMEOUT_MS
                  ? llm->opts.connect_timeout_ms
                  : PROBE_TIMEOUT_MS;
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, ct);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ct * 2);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    CURLcode cc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    if (cc == CURLE_OK)
        return KORCH_OK;
    const char *env = llm->prov ? llm->prov->url_env : NULL;
    return korch_err_set(err, KORCH_E_HTTP, "cannot reach the model '%s' at '%s': %s (is it running? check %s%s)",
                         llm->name, llm->base_url, cerr[0] ? cerr : curl_easy_strerror(cc), env ? env : "the base URL",
                         env ? " or --llm" : "");
}
