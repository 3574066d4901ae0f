/*  korch_msg_t: the four JSON parts plus identity and buffer frames. */
#include "korch/msg.h"

korch_msg_t *korch_msg_new(const char *msg_type, json_t *content)
{
    korch_msg_t *self = calloc(1, sizeof *self);
    if (!self) {
        json_decref(content);
        return NULL;
    }
    self->identities = zmsg_new();
    self->buffers = zmsg_new();
    self->header = json_pack("{s:s}", "msg_type", msg_type ? msg_type : "");
    self->parent_header = json_object();
    self->metadata = json_object();
    self->content = content ? content : json_object();
    if (!self->identities || !self->buffers || !self->header || !self->parent_header || !self->metadata ||
        !self->content)
        korch_msg_destroy(&self);
    return self;
}

korch_msg_t *korch_msg_new_reply(const korch_msg_t *parent, const char *msg_type, json_t *content)
{
    korch_msg_t *self = korch_msg_new(msg_type, content);
    if (self && parent && parent->header) {
        json_decref(self->parent_header);
        self->parent_header = json_deep_copy(parent->header);
        if (!self->parent_header)
            korch_msg_destroy(&self);
    }
    return self;
}

void korch_msg_destroy(korch_msg_t **msg)
{
    if (!msg || !*msg)
        return;
    korch_msg_t *self = *msg;
    zmsg_destroy(&self->identities);
    zmsg_destroy(&self->buffers);
    json_decref(self->header);
    json_decref(self->parent_header);
    json_decref(self->metadata);
    json_decref(self->content);
    free(self);
    *msg = NULL;
}

static const char *s_str(json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : "";
}

const char *korch_msg_type(const korch_msg_t *msg) { return s_str(msg->header, "msg_type"); }
const char *korch_msg_id(const korch_msg_t *msg) { return s_str(msg->header, "msg_id"); }
const char *korch_msg_parent_id(const korch_msg_t *msg) { return s_str(msg->parent_header, "msg_id"); }
