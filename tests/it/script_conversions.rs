//! Lua scripts' conversions, sandbox and `redis` library, case by case:
//! each script runs through `EVAL ... 1 s a1` on one connection, in order,
//! in RESP2 and then (on a fresh server) in RESP3, and each reply must be
//! the bytes redis-server 7.0.15 answered to the same sequence (sent to it
//! by a script, its replies pasted here). Cases where Turnstile differs on
//! purpose (it reports itself as Redis 7.2.0) are left out; the corpus in
//! `tests/compat/diff_cases/` is compared with a live redis-server in CI.

use crate::common::*;

/// (script, RESP2 reply, RESP3 reply), run in this order after `SET s text`.
const CASES: &[(&str, &str, &str)] = &[
    ("newglobal = 1", "-ERR user_script:1: Attempt to modify a readonly table script: b37f66dcb22f18d6d89b8cf0afd92a1e58a6ded4, on @user_script:1.\r\n", "-ERR user_script:1: Attempt to modify a readonly table script: b37f66dcb22f18d6d89b8cf0afd92a1e58a6ded4, on @user_script:1.\r\n"),
    ("local x = undefinedvar", "-ERR user_script:1: Script attempted to access nonexistent global variable 'undefinedvar' script: e803c2fd844ae086296b9b6b5efbb103066eb648, on @user_script:1.\r\n", "-ERR user_script:1: Script attempted to access nonexistent global variable 'undefinedvar' script: e803c2fd844ae086296b9b6b5efbb103066eb648, on @user_script:1.\r\n"),
    ("error('plain')", "-ERR user_script:1: plain script: 7c69090d716b3b899dd0365cfdda40b6cf8ae98d, on @user_script:1.\r\n", "-ERR user_script:1: plain script: 7c69090d716b3b899dd0365cfdda40b6cf8ae98d, on @user_script:1.\r\n"),
    ("error({err='XERR from table'})", "-XERR from table script: 2555aed8591d83f9f17342109d919ec8a05739da, on @user_script:1.\r\n", "-XERR from table script: 2555aed8591d83f9f17342109d919ec8a05739da, on @user_script:1.\r\n"),
    ("error({err='no code'})", "-no code script: 01accb2501da91725cb6c48964efb8427ad946ca, on @user_script:1.\r\n", "-no code script: 01accb2501da91725cb6c48964efb8427ad946ca, on @user_script:1.\r\n"),
    ("error(123)", "-ERR user_script:1: 123 script: 11e4dc32230d2c1e720fc094a49809887ce1381a, on @user_script:1.\r\n", "-ERR user_script:1: 123 script: 11e4dc32230d2c1e720fc094a49809887ce1381a, on @user_script:1.\r\n"),
    ("error()", "-ERR nil script: aca90d914519fdb9825352bdc0befb59f7c8510f, on @user_script:1.\r\n", "-ERR nil script: aca90d914519fdb9825352bdc0befb59f7c8510f, on @user_script:1.\r\n"),
    ("return redis.error_reply('MY custom')", "-MY custom\r\n", "-MY custom\r\n"),
    ("return redis.error_reply('no code here')", "-no code here\r\n", "-no code here\r\n"),
    ("return redis.error_reply('-ERR with dash')", "-ERR with dash\r\n", "-ERR with dash\r\n"),
    ("return {err='no prefix'}", "-no prefix\r\n", "-no prefix\r\n"),
    ("return {err='ERR x'}", "-ERR x\r\n", "-ERR x\r\n"),
    ("return redis.call()", "-ERR Please specify at least one argument for this redis lib call script: 0a907e1429221a4d85516cab7fd219a82a9439d8, on @user_script:1.\r\n", "-ERR Please specify at least one argument for this redis lib call script: 0a907e1429221a4d85516cab7fd219a82a9439d8, on @user_script:1.\r\n"),
    ("return redis.call({})", "-ERR Lua redis lib command arguments must be strings or integers script: 80747816df1f4411f7c442b928fce6a814214839, on @user_script:1.\r\n", "-ERR Lua redis lib command arguments must be strings or integers script: 80747816df1f4411f7c442b928fce6a814214839, on @user_script:1.\r\n"),
    ("return redis.call('GET', {})", "-ERR Lua redis lib command arguments must be strings or integers script: 1343dc154e60f8f7264d986cb42bf48ba973e527, on @user_script:1.\r\n", "-ERR Lua redis lib command arguments must be strings or integers script: 1343dc154e60f8f7264d986cb42bf48ba973e527, on @user_script:1.\r\n"),
    ("return redis.call('GET', 1.5)", "$-1\r\n", "_\r\n"),
    ("return redis.call('SET', 's', 12345678901234)", "+OK\r\n", "+OK\r\n"),
    ("local t = nil; return t.x", "-ERR user_script:1: attempt to index local 't' (a nil value) script: e62b17c4a64e9b74a6f9be57909ea9e2d0e66784, on @user_script:1.\r\n", "-ERR user_script:1: attempt to index local 't' (a nil value) script: e62b17c4a64e9b74a6f9be57909ea9e2d0e66784, on @user_script:1.\r\n"),
    ("return cjson.decode('[')", "-ERR user_script:1: Expected value but found T_END at character 2 script: fa22f6775c4b5a7555f7903baca8d69e9a2a52fd, on @user_script:1.\r\n", "-ERR user_script:1: Expected value but found T_END at character 2 script: fa22f6775c4b5a7555f7903baca8d69e9a2a52fd, on @user_script:1.\r\n"),
    ("return {pcall(redis.call,'nosuch')}", "*2\r\n$-1\r\n$44\r\nERR Unknown Redis command called from script\r\n", "*2\r\n_\r\n$44\r\nERR Unknown Redis command called from script\r\n"),
    ("return redis.pcall('nosuch')", "-ERR Unknown Redis command called from script\r\n", "-ERR Unknown Redis command called from script\r\n"),
    ("return {redis.pcall('nosuch')}", "*1\r\n-ERR Unknown Redis command called from script\r\n", "*1\r\n-ERR Unknown Redis command called from script\r\n"),
    ("local ok, e = pcall(redis.call, 'nosuch') return type(e)", "$6\r\nstring\r\n", "$6\r\nstring\r\n"),
    ("local ok, e = pcall(redis.call, 'nosuch') return e.err", "$-1\r\n", "_\r\n"),
    ("local ok, e = pcall(error, 'x') return e", "$1\r\nx\r\n", "$1\r\nx\r\n"),
    ("return redis.status_reply('FINE')", "+FINE\r\n", "+FINE\r\n"),
    ("return {ok='fine'}", "+fine\r\n", "+fine\r\n"),
    ("return redis.setresp(4)", "-ERR RESP version must be 2 or 3. script: 921c0a48021d97dfd5884aeea41875972c7804d9, on @user_script:1.\r\n", "-ERR RESP version must be 2 or 3. script: 921c0a48021d97dfd5884aeea41875972c7804d9, on @user_script:1.\r\n"),
    ("return redis.sha1hex('abc')", "$40\r\na9993e364706816aba3e25717850c26c9cd0d89d\r\n", "$40\r\na9993e364706816aba3e25717850c26c9cd0d89d\r\n"),
    ("return redis.sha1hex()", "-ERR wrong number of arguments script: 3c7ce947ae74a835cc575b6ee87fb27503cb7ba4, on @user_script:1.\r\n", "-ERR wrong number of arguments script: 3c7ce947ae74a835cc575b6ee87fb27503cb7ba4, on @user_script:1.\r\n"),
    ("return 3.99", ":3\r\n", ":3\r\n"),
    ("return -3.99", ":-3\r\n", ":-3\r\n"),
    ("return {1,2,nil,4}", "*2\r\n:1\r\n:2\r\n", "*2\r\n:1\r\n:2\r\n"),
    ("return true", ":1\r\n", ":1\r\n"),
    ("return false", "$-1\r\n", "_\r\n"),
    ("return nil", "$-1\r\n", "_\r\n"),
    ("return {true,false,{}}", "*3\r\n:1\r\n$-1\r\n*0\r\n", "*3\r\n:1\r\n_\r\n*0\r\n"),
    ("return 'x' .. 1e15", "$6\r\nx1e+15\r\n", "$6\r\nx1e+15\r\n"),
    ("return tostring(1e15)", "$5\r\n1e+15\r\n", "$5\r\n1e+15\r\n"),
    ("return tostring(2^53)", "$18\r\n9.007199254741e+15\r\n", "$18\r\n9.007199254741e+15\r\n"),
    ("return tostring(0.1)", "$3\r\n0.1\r\n", "$3\r\n0.1\r\n"),
    ("return redis.call('SET','s','text')", "+OK\r\n", "+OK\r\n"),
    ("return redis.log(redis.LOG_WARNING, 'hello')", "$-1\r\n", "_\r\n"),
    ("return redis.log()", "-ERR redis.log() requires two arguments or more. script: 28e28bf25123668ac541f5eec91bf7ad3d2fe0bd, on @user_script:1.\r\n", "-ERR redis.log() requires two arguments or more. script: 28e28bf25123668ac541f5eec91bf7ad3d2fe0bd, on @user_script:1.\r\n"),
    ("return redis.replicate_commands()", ":1\r\n", ":1\r\n"),
    ("return redis.set_repl(redis.REPL_ALL)", "$-1\r\n", "_\r\n"),
    ("return redis.set_repl(99)", "-ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE. script: fae934173b6296d6836d5d5f52e192640f8897d9, on @user_script:1.\r\n", "-ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE. script: fae934173b6296d6836d5d5f52e192640f8897d9, on @user_script:1.\r\n"),
    ("return redis.breakpoint()", "$-1\r\n", "_\r\n"),
    ("return redis.debug('x')", "$-1\r\n", "_\r\n"),
    ("return redis.acl_check_cmd('get','x')", ":1\r\n", ":1\r\n"),
    ("return redis.acl_check_cmd('nosuch')", "-ERR Invalid command passed to redis.acl_check_cmd() script: d2491587bab5149c93be0dce4426f7a06ba9e1a1, on @user_script:1.\r\n", "-ERR Invalid command passed to redis.acl_check_cmd() script: d2491587bab5149c93be0dce4426f7a06ba9e1a1, on @user_script:1.\r\n"),
    ("return #KEYS .. #ARGV", "$2\r\n11\r\n", "$2\r\n11\r\n"),
    ("return string.rep('x', 3)", "$3\r\nxxx\r\n", "$3\r\nxxx\r\n"),
    ("local t = setmetatable({}, {__index = function() error('meta') end}) return t.x", "-ERR user_script:1: meta script: a5d4201f83e42813031a75bf87db04f2a0b431b4, on @user_script:1.\r\n", "-ERR user_script:1: meta script: a5d4201f83e42813031a75bf87db04f2a0b431b4, on @user_script:1.\r\n"),
    ("return _G.foo", "-ERR user_script:1: Script attempted to access nonexistent global variable 'foo' script: 14b334a3e1207cac27cf13552a3fe5249fbac092, on @user_script:1.\r\n", "-ERR user_script:1: Script attempted to access nonexistent global variable 'foo' script: 14b334a3e1207cac27cf13552a3fe5249fbac092, on @user_script:1.\r\n"),
    ("_G.foo = 1", "-ERR user_script:1: Attempt to modify a readonly table script: 53ae55cd731d2c73380626e19821ad44a6cad8fa, on @user_script:1.\r\n", "-ERR user_script:1: Attempt to modify a readonly table script: 53ae55cd731d2c73380626e19821ad44a6cad8fa, on @user_script:1.\r\n"),
    ("rawset(_G, 'foo', 1) return 1", "-ERR Attempt to modify a readonly table script: 5438226983222e26a39631c3893fa85fe69633e8, on @user_script:1.\r\n", "-ERR Attempt to modify a readonly table script: 5438226983222e26a39631c3893fa85fe69633e8, on @user_script:1.\r\n"),
    ("return loadstring('return 1')()", ":1\r\n", ":1\r\n"),
    ("return loadstring('x=1')()", "-ERR [string \"x=1\"]:1: Attempt to modify a readonly table script: 0c14d5734b62d25f8e858e0229d5df5ab94f9eba, on x=1:1.\r\n", "-ERR [string \"x=1\"]:1: Attempt to modify a readonly table script: 0c14d5734b62d25f8e858e0229d5df5ab94f9eba, on x=1:1.\r\n"),
    ("return {double=1.5}", "$3\r\n1.5\r\n", ",1.5\r\n"),
    ("return {double=0.1}", "$19\r\n0.10000000000000001\r\n", ",0.10000000000000001\r\n"),
    ("return {double=3}", "$1\r\n3\r\n", ",3\r\n"),
    ("return {double='x'}", "*0\r\n", "*0\r\n"),
    ("return {map={a=1}}", "*2\r\n$1\r\na\r\n:1\r\n", "%1\r\n$1\r\na\r\n:1\r\n"),
    ("return {set={x=true}}", "*1\r\n$1\r\nx\r\n", "~1\r\n$1\r\nx\r\n"),
    ("return {set={'x'}}", "*1\r\n:1\r\n", "~1\r\n:1\r\n"),
    ("return {big_number='123456789012345678901234567890'}", "$30\r\n123456789012345678901234567890\r\n", "(123456789012345678901234567890\r\n"),
    ("return {verbatim_string={format='txt', string='hi'}}", "$2\r\nhi\r\n", "=6\r\ntxt:hi\r\n"),
    // A line a script chose cannot end early: CR and LF become spaces (in
    // RESP2's bulk string too, as Redis maps them before either), so
    // `(1` and a forged `*5` array are not two replies.
    ("return {big_number='1\\r\\n*5\\r\\n:1'}", "$9\r\n1  *5  :1\r\n", "(1  *5  :1\r\n"),
    ("return {big_number='12\\r3'}", "$4\r\n12 3\r\n", "(12 3\r\n"),
    ("return {big_number='12\\n3'}", "$4\r\n12 3\r\n", "(12 3\r\n"),
    ("return {ok='a\\r\\n+forged'}", "+a  +forged\r\n", "+a  +forged\r\n"),
    ("return {err='a\\r\\n:1'}", "-a  :1\r\n", "-a  :1\r\n"),
    ("return redis.status_reply('x\\r\\n+y')", "+x  +y\r\n", "+x  +y\r\n"),
    ("return redis.error_reply('x\\r\\n-y')", "-ERR x  -y\r\n", "-ERR x  -y\r\n"),
    ("return {{ok='a\\r\\nb'}, {big_number='1\\n2'}}", "*2\r\n+a  b\r\n$3\r\n1 2\r\n", "*2\r\n+a  b\r\n(1 2\r\n"),
    // Redis reads `ok`, `err` and a verbatim format as C strings (up to
    // a NUL); a big number whole.
    ("return {ok='12\\0003'}", "+12\r\n", "+12\r\n"),
    ("return {err='12\\0003'}", "-12\r\n", "-12\r\n"),
    ("return {big_number='12\\0003'}", "$4\r\n12\x003\r\n", "(12\x003\r\n"),
    // A verbatim format is three bytes: cut or padded with spaces.
    ("return {verbatim_string={format='markdown', string='ab'}}", "$2\r\nab\r\n", "=6\r\nmar:ab\r\n"),
    ("return {verbatim_string={format='', string='ab'}}", "$2\r\nab\r\n", "=6\r\n   :ab\r\n"),
    ("return {verbatim_string={format='a\\000b', string='ab'}}", "$2\r\nab\r\n", "=6\r\na  :ab\r\n"),
    ("return {err='E1', ok='x'}", "-E1\r\n", "-E1\r\n"),
    ("return {err=123}", "*0\r\n", "*0\r\n"),
    ("return {err=1.5, 7}", "*1\r\n:7\r\n", "*1\r\n:7\r\n"),
    ("return {err={}}", "*0\r\n", "*0\r\n"),
    ("return {ok='fine', double=1}", "+fine\r\n", "+fine\r\n"),
    ("return {map={a=1}, 7}", "*2\r\n$1\r\na\r\n:1\r\n", "%1\r\n$1\r\na\r\n:1\r\n"),
    ("redis.setresp(3) return redis.call('GET','nokey')", "$-1\r\n", "_\r\n"),
    ("redis.setresp(3) local r = redis.call('GET','nokey') return type(r)", "$3\r\nnil\r\n", "$3\r\nnil\r\n"),
    ("return type(redis.call('GET','nokey'))", "$7\r\nboolean\r\n", "$7\r\nboolean\r\n"),
    ("redis.setresp(3) return true", ":1\r\n", "#t\r\n"),
    ("redis.setresp(3) return false", ":0\r\n", "#f\r\n"),
    ("redis.setresp(3) return {1, nil, 3}", "*1\r\n:1\r\n", "*1\r\n:1\r\n"),
    ("return {1, 2.7, 'x', {ok='o'}, {err='e'}}", "*5\r\n:1\r\n:2\r\n$1\r\nx\r\n+o\r\n-e\r\n", "*5\r\n:1\r\n:2\r\n$1\r\nx\r\n+o\r\n-e\r\n"),
    ("redis.setresp(3) return redis.call('PING')", "+PONG\r\n", "+PONG\r\n"),
];

async fn run_all(resp3: bool) {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    if resp3 {
        let hello = r.call(&["HELLO", "3"]).await;
        assert!(hello.starts_with('%'), "{hello}");
    }
    assert_eq!(r.call(&["SET", "s", "text"]).await, "+OK\r\n");
    for (script, resp2, resp3_reply) in CASES {
        let want = if resp3 { resp3_reply } else { resp2 };
        assert_eq!(
            r.call(&["EVAL", script, "1", "s", "a1"]).await,
            *want,
            "{script:?} in RESP{}",
            if resp3 { 3 } else { 2 }
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversions_and_sandbox_as_redis_in_resp2() {
    run_all(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversions_and_sandbox_as_redis_in_resp3() {
    run_all(true).await;
}
