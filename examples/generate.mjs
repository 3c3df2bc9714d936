#!/usr/bin/env node
// Greedy generation from an ltsedge bundle with transformers.js (Node), from local files only.
//
// Usage: from a folder whose node_modules has @huggingface/transformers, or with LTSEDGE_TRANSFORMERSJS_DIR
// naming such a folder (an ES module import ignores NODE_PATH):
//
//   ltsedge export arch.json --variant generate --weights trained.pt -o bundle
//   node examples/generate.mjs bundle --ids 5,17,99,3 --max-new-tokens 12
//   node examples/generate.mjs bundle --ids 5,17,99,3 --ids 0,0,8,42 --pad 0   # batch 2, left-padded
//   node examples/generate.mjs bundle --text "Hello" --max-new-tokens 12       # bundle has tokenizer.json
//
// Prints one JSON object: {"ids": [[generated ids of row 0], ...]} (and "text" with --text).
// --pad P: in every --ids row, leading P tokens are padding (attention mask 0), the rest the prompt.
// --model-type T: read config.json as model_type T (gpt2 or opt): an override for a config of another
//   type (ltsedge's own bundles say gpt2 or opt themselves, PAR and adaptive embeddings included).
// --stock-cache: let transformers.js make the empty caches (see below).
//
// The bundle is read exactly as `ltsedge export --variant generate` writes it: model.onnx at the top
// (subfolder '', model_file_name 'model', dtype fp32), config.json's model_type gpt2 or opt.
// transformers.js sizes its empty KV caches from the ONNX inputs' dimension names and knows the batch
// axis only as `batch_size`: ltsedge's `batch` gets 0 rows. onnxruntime's Concat of that empty past with
// the new keys works (transformers.js 4.3.1, onnxruntime-node 1.30), but so as not to depend on it this
// script hands generate() the empty caches itself: batch rows, each input's declared heads and head size.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

function fail(message, code = 2) {
    console.error(`generate.mjs: ${message}`);
    process.exit(code);
}

function usage(message) {
    console.error(`generate.mjs: ${message}`);
    console.error('usage: node generate.mjs BUNDLE_DIR (--ids 1,2,3 [--ids ...] [--pad P] | --text TEXT) ' +
        '[--max-new-tokens N] [--model-type gpt2|opt] [--stock-cache]');
    process.exit(2);
}

function parseArgs(argv) {
    const args = { bundle: null, ids: [], pad: null, text: null, maxNewTokens: 12, modelType: null,
        stockCache: false };
    for (let i = 0; i < argv.length; i++) {
        const arg = argv[i];
        const value = () => (i + 1 < argv.length ? argv[++i] : usage(`${arg} needs a value`));
        if (arg === '--ids') args.ids.push(value().split(',').map((s) => Number.parseInt(s, 10)));
        else if (arg === '--pad') args.pad = Number.parseInt(value(), 10);
        else if (arg === '--text') args.text = value();
        else if (arg === '--max-new-tokens') args.maxNewTokens = Number.parseInt(value(), 10);
        else if (arg === '--model-type') args.modelType = value();
        else if (arg === '--stock-cache') args.stockCache = true;  // let transformers.js size the caches
        else if (!arg.startsWith('--') && args.bundle === null) args.bundle = arg;
        else usage(`unknown argument ${arg}`);
    }
    if (args.bundle === null) usage('no bundle directory given');
    if ((args.ids.length > 0) === (args.text !== null)) usage('give --ids or --text (one of them)');
    if (args.ids.flat().some((id) => !Number.isInteger(id) || id < 0)) usage('--ids takes non-negative integers');
    if (new Set(args.ids.map((row) => row.length)).size > 1) usage('every --ids row needs the same length (left-pad)');
    if (args.pad !== null && !(args.pad >= 0)) usage('--pad takes a non-negative integer');
    if (!(args.maxNewTokens > 0)) usage('--max-new-tokens must be a positive integer');
    return args;
}

async function loadTransformers() {
    // An ES module import ignores NODE_PATH: resolve the package from the given folder or the cwd.
    const base = process.env.LTSEDGE_TRANSFORMERSJS_DIR || process.cwd();
    const require = createRequire(path.join(path.resolve(base), 'package.json'));
    let entry;
    try {
        entry = require.resolve('@huggingface/transformers');
    } catch {
        fail(`@huggingface/transformers is not installed under ${base} (npm install @huggingface/transformers)`);
    }
    return import(pathToFileURL(entry).href);
}

/** Empty caches for `batch` rows: every past input as declared, its symbolic batch axis `batch` rows,
 *  its past length 0. */
function emptyCaches(tjs, model, batch) {
    const entries = {};
    for (const meta of model.sessions.model.inputMetadata) {
        if (!meta.name.startsWith('past_key_values.')) continue;
        const [, heads, , headSize] = meta.shape;
        entries[meta.name] = new tjs.Tensor('float32', new Float32Array(0), [batch, heads, 0, headSize]);
    }
    return new tjs.DynamicCache(entries);
}

function promptTensors(tjs, rows, pad) {
    // Left padding: a row's leading `pad` tokens are masked out (a row of padding only: all of it).
    const mask = rows.map((row) => {
        const first = pad === null ? 0 : row.findIndex((id) => id !== pad);
        return row.map((_, j) => (first === -1 || j < first ? 0n : 1n));
    });
    const dims = [rows.length, rows[0].length];
    return {
        input_ids: new tjs.Tensor('int64', BigInt64Array.from(rows.flat().map(BigInt)), dims),
        attention_mask: new tjs.Tensor('int64', BigInt64Array.from(mask.flat()), dims),
    };
}

async function main() {
    const args = parseArgs(process.argv.slice(2));
    const tjs = await loadTransformers();
    tjs.env.allowRemoteModels = false;  // never the network: the bundle is a local folder
    tjs.env.allowLocalModels = true;
    const bundle = path.resolve(args.bundle);  // absolute: read as a folder, not a model id
    const options = { local_files_only: true, subfolder: '', model_file_name: 'model', dtype: 'fp32', device: 'cpu' };
    if (args.modelType !== null) {
        const config = JSON.parse(readFileSync(path.join(bundle, 'config.json'), 'utf8'));
        options.config = { ...config, model_type: args.modelType };
    }
    const model = await tjs.AutoModelForCausalLM.from_pretrained(bundle, options);

    let tokenizer = null;
    let inputs;
    if (args.text !== null) {
        tokenizer = await tjs.AutoTokenizer.from_pretrained(bundle, { local_files_only: true });
        inputs = tokenizer(args.text, { return_tensor: true });
    } else {
        inputs = promptTensors(tjs, args.ids, args.pad);
    }
    const [batch, promptLength] = inputs.input_ids.dims;
    const generated = await model.generate({
        ...inputs,
        max_new_tokens: args.maxNewTokens,
        do_sample: false,
        num_beams: 1,
        ...(args.stockCache ? {} : { past_key_values: emptyCaches(tjs, model, batch) }),
    });
    const ids = generated.tolist().map((row) => row.slice(promptLength).map(Number));
    const result = { ids };
    if (tokenizer) result.text = tokenizer.batch_decode(ids, { skip_special_tokens: true });
    console.log(JSON.stringify(result));
}

try {
    await main();
} catch (error) {
    fail(error.message, 1);  // one line, no stack: the message says what failed
}
