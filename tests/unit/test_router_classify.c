/* The router's request classification (src/router/classify.c): priority, data class (what
 * pins a request to sensitive pools), tenant (by header, or by API key digest) and deadline,
 * from header values alone; the keys' digests the front keeps; and the failover timeline
 * ring (events.c). Links ts_router alone: the library needs nothing of tierrouter's main.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classify.h"
#include "events.h"
#include "front.h"

/* Tenants "acme" (plain) and "clinic" (sensitive as a whole); deadlines 100/1000/10000 ms. */
typedef struct {
    router_config c;
    rc_tenant tenants[2];
    secret_digest digests[2];
} fixture;

static void setup_config(fixture *f, bool keys)
{
    memset(f, 0, sizeof *f);
    f->tenants[0] = (rc_tenant){.name = "acme", .api_key = keys ? "key-acme-0123456789" : NULL};
    f->tenants[1] = (rc_tenant){.name = "clinic", .api_key = keys ? "key-clinic-9876543210" : NULL, .sensitive = true};
    f->c.tenants = f->tenants;
    f->c.tenants_count = 2;
    f->c.priority_header = "X-Priority";
    f->c.data_class_header = "X-Data-Class";
    f->c.tenant_header = "X-Tenant";
    f->c.deadline_header = "X-Deadline-Ms";
    f->c.deadline_ms = (rc_deadlines){.urgent = 100, .normal = 1000, .batch = 10000};
    for (int i = 0; i < 2; i++) secret_hash(f->tenants[i].api_key, &f->digests[i]);
}

static int classify(fixture *f, rt_class_in in, rt_class *out, char *msg)
{
    ts_err e;
    if (rt_classify(&f->c, &in, NULL, out, &e)) return 0;
    snprintf(msg, 200, "%.199s", e.msg);
    return e.http;
}

static void test_priority(void **state)
{
    (void)state;
    fixture f;
    setup_config(&f, false);
    rt_class cl;
    char msg[200];
    assert_int_equal(classify(&f, (rt_class_in){0}, &cl, msg), 0);
    assert_int_equal(cl.prio, PRIO_NORMAL); /* none said: normal */
    assert_int_equal(cl.deadline_ms, 1000);
    assert_int_equal(classify(&f, (rt_class_in){.priority = "URGENT"}, &cl, msg), 0);
    assert_int_equal(cl.prio, PRIO_URGENT);
    assert_int_equal(cl.deadline_ms, 100);
    assert_int_equal(classify(&f, (rt_class_in){.priority = "batch"}, &cl, msg), 0);
    assert_int_equal(cl.prio, PRIO_BATCH);
    assert_int_equal(cl.deadline_ms, 10000);
    const char *bad[] = {"", "high", "urgent ", "urgent,batch", "0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(classify(&f, (rt_class_in){.priority = bad[i]}, &cl, msg), 400);
        assert_string_equal(msg, "X-Priority must be urgent, normal or batch");
    }
}

/* Only "sensitive" marks a request sensitive; a value that is neither that nor one of the
 * plain words is refused rather than read as "not sensitive". */
static void test_data_class(void **state)
{
    (void)state;
    fixture f;
    setup_config(&f, false);
    rt_class cl;
    char msg[200];
    assert_int_equal(classify(&f, (rt_class_in){0}, &cl, msg), 0);
    assert_false(cl.sensitive);
    assert_int_equal(classify(&f, (rt_class_in){.data_class = "Sensitive"}, &cl, msg), 0);
    assert_true(cl.sensitive);
    const char *plain[] = {"public", "INTERNAL", "normal"};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(classify(&f, (rt_class_in){.data_class = plain[i]}, &cl, msg), 0);
        assert_false(cl.sensitive);
    }
    const char *bad[] = {"public, sensitive", "sensitive ", "secret", "", "sensitiv"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(classify(&f, (rt_class_in){.data_class = bad[i]}, &cl, msg), 400);
        assert_non_null(strstr(msg, "X-Data-Class must be one value"));
    }
}

/* Without API keys the tenant header names the tenant; a sensitive tenant pins every one of
 * its requests to sensitive pools whatever the data class says. With keys, the keyed tenant
 * counts and the header is not read. */
static void test_tenant_and_pinning(void **state)
{
    (void)state;
    fixture f;
    setup_config(&f, false);
    rt_class cl;
    char msg[200];
    assert_int_equal(classify(&f, (rt_class_in){.tenant = "acme"}, &cl, msg), 0);
    assert_ptr_equal(cl.tenant, &f.tenants[0]);
    assert_false(cl.sensitive);
    assert_int_equal(classify(&f, (rt_class_in){.tenant = "clinic", .data_class = "public"}, &cl, msg), 0);
    assert_ptr_equal(cl.tenant, &f.tenants[1]);
    assert_true(cl.sensitive);
    assert_int_equal(classify(&f, (rt_class_in){.tenant = "nobody"}, &cl, msg), 0);
    assert_null(cl.tenant);
    assert_false(cl.sensitive);

    setup_config(&f, true);
    rt_class_in in = {.tenant = "clinic"}; /* a header naming another tenant is not believed */
    ts_err err;
    assert_int_equal(rt_classify(&f.c, &in, &f.tenants[0], &cl, &err), true);
    assert_ptr_equal(cl.tenant, &f.tenants[0]);
    assert_false(cl.sensitive);
    assert_int_equal(rt_classify(&f.c, &in, NULL, &cl, &err), true);
    assert_null(cl.tenant);
    assert_int_equal(rt_classify(&f.c, &(rt_class_in){0}, &f.tenants[1], &cl, &err), true);
    assert_true(cl.sensitive);
}

/* A request may shorten its priority's deadline, never extend it. */
static void test_deadline(void **state)
{
    (void)state;
    fixture f;
    setup_config(&f, false);
    rt_class cl;
    char msg[200];
    assert_int_equal(classify(&f, (rt_class_in){.deadline = "250"}, &cl, msg), 0);
    assert_int_equal(cl.deadline_ms, 250);
    assert_int_equal(classify(&f, (rt_class_in){.deadline = "5000"}, &cl, msg), 0);
    assert_int_equal(cl.deadline_ms, 1000);
    assert_int_equal(classify(&f, (rt_class_in){.priority = "urgent", .deadline = "250"}, &cl, msg), 0);
    assert_int_equal(cl.deadline_ms, 100);
    const char *bad[] = {"0", "-5", "", "12ms", "1.5", "7 "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(classify(&f, (rt_class_in){.deadline = bad[i]}, &cl, msg), 400);
        assert_string_equal(msg, "X-Deadline-Ms must be a positive number of milliseconds");
    }
    assert_int_equal(classify(&f, (rt_class_in){.version = "12345678901234567890123456789012"}, &cl, msg), 400);
    assert_string_equal(msg, "model version is longer than 31 characters");
    assert_int_equal(classify(&f, (rt_class_in){.version = "1234567890123456789012345678901"}, &cl, msg), 0);
}

static void test_tenant_by_key(void **state)
{
    (void)state;
    fixture f;
    setup_config(&f, true);
    assert_ptr_equal(rt_tenant_by_key(&f.c, f.digests, "key-acme-0123456789"), &f.tenants[0]);
    assert_ptr_equal(rt_tenant_by_key(&f.c, f.digests, "key-clinic-9876543210"), &f.tenants[1]);
    assert_null(rt_tenant_by_key(&f.c, f.digests, "key-acme-012345678"));
    assert_null(rt_tenant_by_key(&f.c, f.digests, "key-acme-0123456789 "));
    assert_null(rt_tenant_by_key(&f.c, f.digests, ""));
    assert_null(rt_tenant_by_key(&f.c, f.digests, NULL));
    /* a key longer than any config allows matches nothing, even one that is configured */
    char longkey[RT_SECRET_MAX + 2];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    f.tenants[0].api_key = longkey;
    secret_hash(longkey, &f.digests[0]);
    assert_null(rt_tenant_by_key(&f.c, f.digests, longkey));
    longkey[RT_SECRET_MAX] = '\0'; /* the longest allowed */
    secret_hash(longkey, &f.digests[0]);
    assert_ptr_equal(rt_tenant_by_key(&f.c, f.digests, longkey), &f.tenants[0]);
    /* no tenants without keys: a missing key names nobody */
    setup_config(&f, false);
    assert_null(rt_tenant_by_key(&f.c, f.digests, NULL));
    assert_null(rt_tenant_by_key(&f.c, f.digests, "anything"));
}

/* The front hashes every tenant's key once, at start, in the order rt_tenant_by_key reads
 * them (front.c: this call also links the whole front, proxy and backends into the test). */
static void test_front_init_hashes_keys(void **state)
{
    (void)state;
    fixture f;
    setup_config(&f, true);
    static router r;
    r.cfg = &f.c;
    assert_int_equal(rt_front_init(&r), 0);
    assert_ptr_equal(rt_tenant_by_key(&f.c, r.key_digests, "key-acme-0123456789"), &f.tenants[0]);
    assert_ptr_equal(rt_tenant_by_key(&f.c, r.key_digests, "key-clinic-9876543210"), &f.tenants[1]);
    assert_null(rt_tenant_by_key(&f.c, r.key_digests, "key-clinic"));
    free(r.key_digests);
}

/* The timeline keeps the last RT_EVENTS entries, oldest first, each field cut to fit. */
static void test_events_ring(void **state)
{
    (void)state;
    static rt_events ev;
    memset(&ev, 0, sizeof ev);
    for (int i = 1; i <= RT_EVENTS + 3; i++) rt_event_add(&ev, "ejection", "gpu", "backend %d", i);
    buf b;
    buf_init(&b, 1 << 16);
    rt_events_json(&ev, &b);
    buf_putc(&b, '\0');
    const char *s = (const char *)b.data;
    assert_non_null(strstr(s, "\"seq\":4,"));
    assert_null(strstr(s, "\"seq\":3,"));
    char last[32];
    snprintf(last, sizeof last, "\"text\":\"backend %d\"}],", RT_EVENTS + 3);
    assert_non_null(strstr(s, last));
    assert_true(strstr(s, "\"seq\":4,") < strstr(s, "\"seq\":5,"));
    char kind[64];
    memset(kind, 'x', sizeof kind - 1);
    kind[sizeof kind - 1] = '\0';
    rt_event_add(&ev, kind, "gpu", "%s", "cut");
    assert_int_equal(strlen(ev.ring[(ev.n - 1) % RT_EVENTS].kind), sizeof ev.ring[0].kind - 1);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_priority),        cmocka_unit_test(test_data_class),
        cmocka_unit_test(test_tenant_and_pinning), cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_tenant_by_key),   cmocka_unit_test(test_front_init_hashes_keys),
        cmocka_unit_test(test_events_ring),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
