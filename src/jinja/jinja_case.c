/* jinja: JavaScript's toUpperCase / toLowerCase on UTF-8, for upper, lower, capitalize, the
 * lower/upper tests and case-insensitive sorting. The one-to-one mappings are glibc's
 * Unicode tables (the C.UTF-8 locale, independent of the process's locale); the mappings
 * that change length (SpecialCasing: ß -> SS, ligatures, İ -> i̇) and the final sigma are
 * here. Without C.UTF-8 only ASCII changes (documented in jinja.h). */
#include <locale.h>
#include <pthread.h>
#include <string.h>
#include <wctype.h>

#include "jinja_int.h"

static locale_t utf8_loc;
static pthread_once_t utf8_once = PTHREAD_ONCE_INIT;

static void utf8_init(void)
{
    utf8_loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

/* SpecialCasing.txt's unconditional upper-case mappings that are not one code point */
static const struct {
    uint32_t cp;
    uint32_t to[3];
} UPPER_SPECIAL[] = {
    {0x00DF, {0x53, 0x53}},        {0x0149, {0x2BC, 0x4E}},        {0x01F0, {0x4A, 0x30C}},
    {0x0390, {0x399, 0x308, 0x301}}, {0x03B0, {0x3A5, 0x308, 0x301}}, {0x0587, {0x535, 0x552}},
    {0x1E96, {0x48, 0x331}},       {0x1E97, {0x54, 0x308}},        {0x1E98, {0x57, 0x30A}},
    {0x1E99, {0x59, 0x30A}},       {0x1E9A, {0x41, 0x2BE}},        {0xFB00, {0x46, 0x46}},
    {0xFB01, {0x46, 0x49}},        {0xFB02, {0x46, 0x4C}},         {0xFB03, {0x46, 0x46, 0x49}},
    {0xFB04, {0x46, 0x46, 0x4C}},  {0xFB05, {0x53, 0x54}},         {0xFB06, {0x53, 0x54}},
    {0xFB13, {0x544, 0x546}},      {0xFB14, {0x544, 0x535}},       {0xFB15, {0x544, 0x53B}},
    {0xFB16, {0x54E, 0x546}},      {0xFB17, {0x544, 0x53D}},
};

static bool is_cased_letter(uint32_t cp)
{
    return utf8_loc ? (iswupper_l((wint_t)cp, utf8_loc) || iswlower_l((wint_t)cp, utf8_loc))
                    : ((cp | 32) >= 'a' && (cp | 32) <= 'z');
}

/* the code point before s[at] (0 at the start) */
static uint32_t cp_before(const char *s, size_t at)
{
    if (at == 0)
        return 0;
    size_t k = at - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
        k--;
    size_t n;
    return ju_decode(s + k, at - k, &n);
}

jval js_case(jrt *rt, jval s, bool upper)
{
    pthread_once(&utf8_once, utf8_init);
    jsb out = {0};
    char enc[4];
    for (size_t i = 0; i < s.len;) {
        unsigned char c = (unsigned char)s.u.s[i];
        if (c < 0x80) { /* the common case, byte by byte */
            char o = (char)c;
            if (upper && c >= 'a' && c <= 'z')
                o = (char)(c - 32);
            else if (!upper && c >= 'A' && c <= 'Z')
                o = (char)(c + 32);
            jsb_putc(rt, &out, o);
            i++;
            continue;
        }
        size_t n;
        uint32_t cp = ju_decode(s.u.s + i, s.len - i, &n), to = cp;
        bool done = false;
        if (upper) {
            for (size_t k = 0; k < sizeof UPPER_SPECIAL / sizeof UPPER_SPECIAL[0] && !done; k++)
                if (UPPER_SPECIAL[k].cp == cp) {
                    for (int j = 0; j < 3 && UPPER_SPECIAL[k].to[j]; j++)
                        jsb_put(rt, &out, enc, ju_encode(UPPER_SPECIAL[k].to[j], enc));
                    done = true;
                }
            if (!done && utf8_loc)
                to = (uint32_t)towupper_l((wint_t)cp, utf8_loc);
        } else if (cp == 0x130) { /* İ -> i + combining dot above */
            jsb_put(rt, &out, "i\xCC\x87", 3);
            done = true;
        } else if (cp == 0x3A3) { /* Σ at the end of a word is ς */
            size_t m = 0;
            uint32_t next = i + n < s.len ? ju_decode(s.u.s + i + n, s.len - i - n, &m) : 0;
            to = is_cased_letter(cp_before(s.u.s, i)) && !is_cased_letter(next) ? 0x3C2 : 0x3C3;
        } else if (utf8_loc) {
            to = (uint32_t)towlower_l((wint_t)cp, utf8_loc);
        }
        if (!done)
            jsb_put(rt, &out, enc, ju_encode(to, enc));
        i += n;
    }
    return jsb_val(&out);
}
