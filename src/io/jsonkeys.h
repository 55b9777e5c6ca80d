// Duplicate keys in JSON text. json-c keeps the last of two equal keys without a word (and cuts
// a key at an escaped NUL), so a reader that must refuse such text scans it once more itself.
#ifndef HETRAIN_JSONKEYS_H
#define HETRAIN_JSONKEYS_H

#include <stddef.h>

typedef enum jsonkeys_kind {
    JSONKEYS_NONE,      // every object's keys are distinct
    JSONKEYS_DUPLICATE, // an object has `key` twice
    JSONKEYS_NUL,       // `key` holds an escaped NUL (\u0000), which json-c would cut off
} jsonkeys_kind;

typedef struct jsonkeys_finding {
    jsonkeys_kind kind;
    char key[96];    // the key, decoded, with bytes outside printable ASCII as \xNN, '"' and
                     // '\' escaped; cut with "..." when longer
    char parent[96]; // the key whose value holds the object, in the same form
    int nested;      // 0: the object is the top-level value (no parent)
    size_t offset;   // byte offset of the (second) occurrence of the key in the text
} jsonkeys_finding;

// Scans `len` bytes of JSON text that a strict parser has already accepted (anything else is
// walked without reading past len, but findings are then meaningless). Keys compare after
// decoding escapes, so "a.b" and "a\u002eb" are the same key. Reports the finding that comes
// first in the text. Returns 0 (f->kind says what was found), or -1 when out of memory.
int jsonkeys_scan(const char *text, size_t len, jsonkeys_finding *f);

#endif
