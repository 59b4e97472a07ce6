# rlx-bench's Python peers, kept running so that rounds interleave with RLX: reads one command a
# line on stdin and answers one JSON line. Commands:
#   probe                      -> which peers import (numpy, jax, onnxruntime)
#   matmul N REPS              -> numpy f32 n x n matmul, each rep's seconds
#   jax_matmul N REPS          -> JAX jit f32 n x n matmul (block_until_ready), each rep's seconds
#   mkl_matmul N REPS THREADS  -> oneMKL cblas_sgemm f32 n x n on THREADS threads, each rep's seconds
#                                 (only with RLX_BENCH_MKL: the folders of libmkl_rt.so.{2,3} and
#                                 libiomp5.so, ':'-separated; see `mkl()`)
#   jax_matmul_bf16 N REPS F32 -> JAX jit bf16 n x n matmul, result bf16 (F32 = 0) or f32 (1)
#   jax_minilm DIR B S REPS    -> JAX jit MiniLM forward (mean pooled, normalized), seconds + embeddings
#   mlx_minilm DIR B S REPS    -> the same MiniLM in MLX's Python API (mx.compile, CPU device), seconds
#                                 + embeddings
#   ort_minilm ONNX B S REPS   -> ONNX Runtime (ORT_ENABLE_ALL) on a graph from build_onnx.py
#   rfft N REPS                -> numpy.fft.rfft of N float32 points (complex64 out), each rep's seconds
#   solve N B REPS             -> numpy.linalg.solve (LAPACK gesv) of B float64 n x n systems, one
#                                 right-hand side each ([B, n, n] and [B, n, 1]), each rep's seconds
#   sparse M K DT REPS         -> scipy.sparse CSR (int32 indices, DT = f32 | f64 values) of the 5-point
#                                 Laplacian on an M x M grid times x ([n] for K = 0, else [n, K]),
#                                 x = (arange % 7) - 3 row-major: seconds + y's sum and first entries
#   jax_qwen3 FILE S REPS DT   -> JAX jit Qwen3 layer in DT (f32 or bf16: bf16 values, f32 sums in the
#                                 matmuls and norms) on the weights of rlx-bench's safetensors file:
#                                 seconds + the last token's normalized hidden state
import json, sys, time, math, os

import numpy as np

cache = {}


def ids_for(dirname, b, s):
    # The same token ids as rlx-bench: the sample sentence cut to s tokens, [SEP] kept last.
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(dirname + '/tokenizer.json')
    text = "the quick brown fox jumps over the lazy dog while the compiler plans its arena " * 40
    ids = tok.encode(text).ids
    row = ids[:s]
    row[-1] = ids[-1]
    return np.array([row] * b, dtype=np.int32)


def timed(f, reps):
    f()
    out = []
    for _ in range(reps):
        t = time.perf_counter(); f(); out.append(time.perf_counter() - t)
    return out


def jax_minilm(dirname, b, s, reps):
    import jax, jax.numpy as jnp
    from jax.scipy.special import erf
    from safetensors.numpy import load_file
    key = ('jax', dirname, b, s)
    if key not in cache:
        cfg = json.load(open(dirname + '/config.json'))
        H, NH, NL, EPS = cfg['hidden_size'], cfg['num_attention_heads'], cfg['num_hidden_layers'], cfg['layer_norm_eps']
        hd = H // NH
        P = {k: jnp.asarray(v) for k, v in load_file(dirname + '/model.safetensors').items() if v.dtype == np.float32}
        pre0 = 'bert.' if any(k.startswith('bert.') for k in P) else ''

        def ln(x, g, bb):
            m = x.mean(-1, keepdims=True); v = ((x - m) ** 2).mean(-1, keepdims=True)
            return (x - m) / jnp.sqrt(v + EPS) * g + bb

        def fwd(P, ids, mask):
            B, L = ids.shape
            w = lambda n: P[pre0 + n]
            lin = lambda x, p: x @ w(p + '.weight').T + w(p + '.bias')
            heads = lambda t: t.reshape(B, L, NH, hd).transpose(0, 2, 1, 3)
            x = w('embeddings.word_embeddings.weight')[ids] + w('embeddings.position_embeddings.weight')[:L][None] \
                + w('embeddings.token_type_embeddings.weight')[0]
            x = ln(x, w('embeddings.LayerNorm.weight'), w('embeddings.LayerNorm.bias'))
            ext = (1.0 - mask[:, None, None, :].astype(jnp.float32)) * -1e9
            for i in range(NL):
                pre = f'encoder.layer.{i}.'
                q, k, v = (heads(lin(x, pre + 'attention.self.' + n)) for n in ('query', 'key', 'value'))
                sc = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + ext
                p = jax.nn.softmax(sc, axis=-1)
                c = (p @ v).transpose(0, 2, 1, 3).reshape(B, L, H)
                x = ln(x + lin(c, pre + 'attention.output.dense'), w(pre + 'attention.output.LayerNorm.weight'),
                       w(pre + 'attention.output.LayerNorm.bias'))
                h = lin(x, pre + 'intermediate.dense'); h = 0.5 * h * (1 + erf(h / math.sqrt(2)))
                x = ln(x + lin(h, pre + 'output.dense'), w(pre + 'output.LayerNorm.weight'), w(pre + 'output.LayerNorm.bias'))
            m = mask[:, :, None].astype(jnp.float32)
            e = (x * m).sum(1) / jnp.maximum(m.sum(1), 1e-9)
            return e / jnp.maximum(jnp.linalg.norm(e, axis=1, keepdims=True), 1e-12)

        ids = jnp.asarray(ids_for(dirname, b, s))
        mask = jnp.ones(ids.shape, jnp.int32)
        jf = jax.jit(fwd)
        t = time.perf_counter(); jf(P, ids, mask).block_until_ready(); first = time.perf_counter() - t
        cache[key] = (jf, P, ids, mask, first)
    jf, P, ids, mask, first = cache[key]
    ts = timed(lambda: jf(P, ids, mask).block_until_ready(), reps)
    return {'seconds': ts, 'first_call': first, 'embeddings': np.asarray(jf(P, ids, mask)).tolist()}


def mlx_minilm(dirname, b, s, reps):
    import mlx.core as mx
    from safetensors.numpy import load_file
    key = ('mlx', dirname, b, s)
    if key not in cache:
        mx.set_default_device(mx.cpu)
        cfg = json.load(open(dirname + '/config.json'))
        H, NH, NL, EPS = cfg['hidden_size'], cfg['num_attention_heads'], cfg['num_hidden_layers'], cfg['layer_norm_eps']
        hd = H // NH
        P = {k: mx.array(v) for k, v in load_file(dirname + '/model.safetensors').items() if v.dtype == np.float32}
        pre0 = 'bert.' if any(k.startswith('bert.') for k in P) else ''

        def fwd(ids, mask):
            B, L = ids.shape
            w = lambda n: P[pre0 + n]
            lin = lambda x, p: x @ w(p + '.weight').T + w(p + '.bias')
            heads = lambda t: t.reshape(B, L, NH, hd).transpose(0, 2, 1, 3)
            ln = lambda x, p: mx.fast.layer_norm(x, w(p + '.weight'), w(p + '.bias'), EPS)
            x = w('embeddings.word_embeddings.weight')[ids] + w('embeddings.position_embeddings.weight')[:L][None] \
                + w('embeddings.token_type_embeddings.weight')[0]
            x = ln(x, 'embeddings.LayerNorm')
            ext = ((1.0 - mask[:, None, None, :].astype(mx.float32)) * -1e9)
            for i in range(NL):
                pre = f'encoder.layer.{i}.'
                q, k, v = (heads(lin(x, pre + 'attention.self.' + n)) for n in ('query', 'key', 'value'))
                c = mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(hd), mask=ext)
                c = c.transpose(0, 2, 1, 3).reshape(B, L, H)
                x = ln(x + lin(c, pre + 'attention.output.dense'), pre + 'attention.output.LayerNorm')
                h = lin(x, pre + 'intermediate.dense'); h = 0.5 * h * (1 + mx.erf(h / math.sqrt(2)))
                x = ln(x + lin(h, pre + 'output.dense'), pre + 'output.LayerNorm')
            m = mask[:, :, None].astype(mx.float32)
            e = (x * m).sum(1) / mx.maximum(m.sum(1), 1e-9)
            return e / mx.maximum(mx.linalg.norm(e, axis=1, keepdims=True), 1e-12)

        ids = mx.array(ids_for(dirname, b, s))
        mask = mx.ones(ids.shape, mx.int32)
        f = mx.compile(fwd)
        t = time.perf_counter(); mx.eval(f(ids, mask)); first = time.perf_counter() - t
        cache[key] = (f, ids, mask, first)
    f, ids, mask, first = cache[key]
    ts = timed(lambda: mx.eval(f(ids, mask)), reps)
    return {'seconds': ts, 'first_call': first, 'embeddings': np.array(f(ids, mask)).tolist()}


def jax_qwen3(path, s, reps, dt='f32'):
    # Embedding rows -> one Qwen3 decoder layer -> final rms_norm, as rlx-bench's qwen3.rs.
    import jax, jax.numpy as jnp
    from safetensors.numpy import load_file
    key = ('qwen3', path, s, dt)
    if key not in cache:
        T = jnp.bfloat16 if dt == 'bf16' else jnp.float32
        W = {k: jnp.asarray(v, T) for k, v in load_file(path).items()}
        pre = 'model.layers.0.'
        vocab, D = W['model.embed_tokens.weight'].shape
        DH = W[pre + 'self_attn.q_norm.weight'].shape[0]
        H, KV = W[pre + 'self_attn.q_proj.weight'].shape[0] // DH, W[pre + 'self_attn.k_proj.weight'].shape[0] // DH
        eps, theta = 1e-6, 1e6
        inv = jnp.asarray(theta ** (-np.arange(0, DH, 2) / DH), jnp.float32)

        def rms(x, w):
            # In f32, rounded to T once (as RLX's half norms).
            x32 = x.astype(jnp.float32)
            return (x32 * jax.lax.rsqrt((x32 * x32).mean(-1, keepdims=True) + eps) * w.astype(jnp.float32)).astype(T)

        def mm(a, b):
            return jnp.matmul(a, b, preferred_element_type=jnp.float32).astype(T)

        def rope(x, pos):
            ang = pos[:, None] * inv[None]
            c, sn = jnp.cos(ang), jnp.sin(ang)
            x = x.astype(jnp.float32)
            x1, x2 = x[..., :DH // 2], x[..., DH // 2:]
            return jnp.concatenate([x1 * c - x2 * sn, x2 * c + x1 * sn], -1).astype(T)

        def fwd(W, ids):
            p = lambda n: W[pre + n]
            S = ids.shape[0]
            x = W['model.embed_tokens.weight'][ids]
            h = rms(x, p('input_layernorm.weight'))
            heads = lambda t, n: t.reshape(S, n, DH).transpose(1, 0, 2)
            q = rms(heads(mm(h, p('self_attn.q_proj.weight').T), H), p('self_attn.q_norm.weight'))
            k = rms(heads(mm(h, p('self_attn.k_proj.weight').T), KV), p('self_attn.k_norm.weight'))
            v = heads(mm(h, p('self_attn.v_proj.weight').T), KV)
            pos = jnp.arange(S, dtype=jnp.float32)
            q, k = rope(q, pos), rope(k, pos)
            k, v = jnp.repeat(k, H // KV, axis=0), jnp.repeat(v, H // KV, axis=0)
            sc = jnp.matmul(q, k.transpose(0, 2, 1), preferred_element_type=jnp.float32) / math.sqrt(DH)
            sc = jnp.where(jnp.tril(jnp.ones((S, S), bool)), sc, -jnp.inf)
            a = mm(jax.nn.softmax(sc, axis=-1).astype(T), v).transpose(1, 0, 2).reshape(S, H * DH)
            r = x + mm(a, p('self_attn.o_proj.weight').T)
            h2 = rms(r, p('post_attention_layernorm.weight'))
            m = jax.nn.silu(mm(h2, p('mlp.gate_proj.weight').T)) * mm(h2, p('mlp.up_proj.weight').T)
            return rms(r + mm(m, p('mlp.down_proj.weight').T), W['model.norm.weight'])

        ids = jnp.asarray(np.array([(i * 7 + 3) % vocab for i in range(s)], np.int32))
        jf = jax.jit(fwd)
        jf(W, ids).block_until_ready()
        cache[key] = (jf, W, ids)
    jf, W, ids = cache[key]
    ts = timed(lambda: jf(W, ids).block_until_ready(), reps)
    return {'seconds': ts, 'last': np.asarray(jf(W, ids).astype(jnp.float32))[-1].tolist()}


def ort_minilm(path, dirname, b, s, reps):
    import onnxruntime as ort
    key = ('ort', path, b, s)
    if key not in cache:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        sess = ort.InferenceSession(path, so, providers=['CPUExecutionProvider'])
        ids = ids_for(dirname, b, s).astype(np.int64)
        feed = {'input_ids': ids, 'token_type_ids': np.zeros_like(ids), 'attention_mask': np.ones_like(ids)}
        names = {i.name for i in sess.get_inputs()}
        feed = {k: v for k, v in feed.items() if k in names}
        cache[key] = (sess, feed)
    sess, feed = cache[key]
    return {'seconds': timed(lambda: sess.run(None, feed), reps)}


def square_inputs(n):
    """The f32 n x n operands numpy's and oneMKL's matmuls share (made once per n)."""
    if ('mm', n) not in cache:
        rng = np.random.default_rng(0)
        cache[('mm', n)] = (rng.random((n, n), np.float32), rng.random((n, n), np.float32))
    return cache[('mm', n)]


_MKL = []


def mkl():
    """oneMKL's cblas_sgemm (row-major f32), loaded from the folders in RLX_BENCH_MKL (unpacked
    `pip download mkl intel-openmp` wheels: no system install), or None. Its OpenMP threads
    sleep right after a call (KMP_BLOCKTIME=0) instead of spinning into RLX's timed runs."""
    if not _MKL:
        import ctypes
        dirs = [d for d in os.environ.get('RLX_BENCH_MKL', '').split(':') if d]
        os.environ.setdefault('KMP_BLOCKTIME', '0')
        lib = None
        try:
            # oneMKL 2025 ships libmkl_rt.so.2, 2026 libmkl_rt.so.3.
            for names in (('libiomp5.so',), ('libmkl_rt.so.3', 'libmkl_rt.so.2')):
                path = next((os.path.join(d, n) for n in names for d in dirs if os.path.exists(os.path.join(d, n))), None)
                if path is None:
                    raise OSError(f"{' or '.join(names)} not in RLX_BENCH_MKL")
                lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            lib.cblas_sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int,
                                                             ctypes.c_void_p, ctypes.c_int, ctypes.c_float,
                                                             ctypes.c_void_p, ctypes.c_int]
            lib.MKL_Set_Num_Threads.argtypes = [ctypes.c_int]
        except (OSError, AttributeError):
            lib = None
        _MKL.append(lib)
    return _MKL[0]


def poisson(m, dt):
    # The matrix of rlx-bench's sparse.rs: kron(I, T) + kron(T, I), T = tridiag(-1, 2, -1).
    if ('poisson', m, dt) not in cache:
        import scipy.sparse as sp
        t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
        eye = sp.identity(m)
        a = sp.csr_matrix(sp.kron(eye, t) + sp.kron(t, eye)).astype(dt)
        a.sort_indices()
        a.indices, a.indptr = a.indices.astype(np.int32), a.indptr.astype(np.int32)
        cache[('poisson', m, dt)] = a
    return cache[('poisson', m, dt)]


def main():
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        try:
            if cmd[0] == 'probe':
                have = {}
                for mod in ('numpy', 'scipy', 'jax', 'onnxruntime', 'tokenizers', 'safetensors', 'mlx'):
                    try:
                        m = __import__(mod); have[mod] = getattr(m, '__version__', '?')
                    except Exception as e:
                        have[mod] = None
                have['mkl'] = 'oneMKL' if mkl() is not None else None
                out = have
            elif cmd[0] == 'matmul':
                n, reps = int(cmd[1]), int(cmd[2])
                a, b = square_inputs(n)
                out = {'seconds': timed(lambda: a @ b, reps)}
            elif cmd[0] == 'rfft':
                n, reps = int(cmd[1]), int(cmd[2])
                x = np.random.default_rng(0).random(n, np.float32)
                if np.fft.rfft(x).dtype != np.complex64:
                    raise RuntimeError('numpy.fft.rfft computes float32 in double (numpy < 2)')
                out = {'seconds': timed(lambda: np.fft.rfft(x), reps)}
            elif cmd[0] == 'solve':
                n, bs, reps = int(cmd[1]), int(cmd[2]), int(cmd[3])
                rng = np.random.default_rng(0)
                a = rng.random((bs, n, n)) + n * np.eye(n)
                b = rng.random((bs, n, 1))
                out = {'seconds': timed(lambda: np.linalg.solve(a, b), reps)}
            elif cmd[0] == 'sparse':
                m, k, reps = int(cmd[1]), int(cmd[2]), int(cmd[4])
                dt = {'f32': np.float32, 'f64': np.float64}[cmd[3]]
                a = poisson(m, dt)
                n = a.shape[0]
                x = ((np.arange(n * max(k, 1)) % 7) - 3).astype(dt)
                if k > 0:
                    x = x.reshape(n, k)
                y = a @ x
                out = {'seconds': timed(lambda: a @ x, reps), 'sum': float(y.astype(np.float64).sum()),
                       'head': [float(v) for v in y.reshape(-1)[:8]]}
            elif cmd[0] == 'mkl_matmul':
                n, reps, threads = int(cmd[1]), int(cmd[2]), int(cmd[3])
                lib = mkl()
                if lib is None:
                    raise RuntimeError('oneMKL not found in RLX_BENCH_MKL')
                lib.MKL_Set_Num_Threads(threads)
                a, b = square_inputs(n)
                c = np.empty((n, n), np.float32)
                # Row-major (101), no transposes (111): C = A B.
                run = lambda: lib.cblas_sgemm(101, 111, 111, n, n, n, 1.0, a.ctypes.data, n, b.ctypes.data, n,
                                              0.0, c.ctypes.data, n)
                run()
                if not np.allclose(c[:4, :4], a[:4] @ b[:, :4], rtol=1e-4):
                    raise RuntimeError('oneMKL sgemm disagrees with numpy')
                out = {'seconds': timed(run, reps)}
            elif cmd[0] == 'jax_matmul':
                import jax, jax.numpy as jnp
                n, reps = int(cmd[1]), int(cmd[2])
                if ('jmm', n) not in cache:
                    rng = np.random.default_rng(0)
                    a, b = (jnp.asarray(rng.random((n, n), np.float32)) for _ in range(2))
                    cache[('jmm', n)] = (jax.jit(jnp.matmul), a, b)
                f, a, b = cache[('jmm', n)]
                out = {'seconds': timed(lambda: f(a, b).block_until_ready(), reps)}
            elif cmd[0] == 'jax_matmul_bf16':
                import jax, jax.numpy as jnp
                n, reps, f32 = int(cmd[1]), int(cmd[2]), cmd[3] == '1'
                if ('jbf', n, f32) not in cache:
                    rng = np.random.default_rng(0)
                    a, b = (jnp.asarray(rng.random((n, n), np.float32), jnp.bfloat16) for _ in range(2))
                    pet = jnp.float32 if f32 else None
                    cache[('jbf', n, f32)] = (jax.jit(lambda x, y: jnp.matmul(x, y, preferred_element_type=pet)), a, b)
                f, a, b = cache[('jbf', n, f32)]
                out = {'seconds': timed(lambda: f(a, b).block_until_ready(), reps)}
            elif cmd[0] == 'jax_minilm':
                out = jax_minilm(cmd[1], int(cmd[2]), int(cmd[3]), int(cmd[4]))
            elif cmd[0] == 'mlx_minilm':
                out = mlx_minilm(cmd[1], int(cmd[2]), int(cmd[3]), int(cmd[4]))
            elif cmd[0] == 'jax_qwen3':
                out = jax_qwen3(cmd[1], int(cmd[2]), int(cmd[3]), cmd[4] if len(cmd) > 4 else 'f32')
            elif cmd[0] == 'ort_minilm':
                out = ort_minilm(cmd[1], cmd[2], int(cmd[3]), int(cmd[4]), int(cmd[5]))
            else:
                out = {'error': f'unknown command {cmd[0]}'}
        except Exception as e:
            out = {'error': f'{type(e).__name__}: {e}'}
        sys.stdout.write(json.dumps(out) + '\n'); sys.stdout.flush()


main()
