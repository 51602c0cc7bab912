#!/usr/bin/env node
// Publish invoice messages to gapless with amqplib: a producer that does not use gapless.
//
// What it does is the producer's contract (docs/message.md, "Publishing"):
//  * the default exchange, routing key GAPLESS_QUEUE ("invoices" by default); with
//    GAPLESS_QUEUE_TYPE=quorum user work goes to "<GAPLESS_QUEUE>.user";
//  * contentType application/json, deliveryMode 2 (persistent), the AMQP priority property 4 for
//    user work and 1 for batch (the message's "priority" field, or --priority), messageId the
//    invoice_id;
//  * a confirm channel and the mandatory flag: a message counts as sent only once the broker
//    confirmed it; an unroutable one (no queue: start a gapless worker first, which declares
//    it) or a nacked one is reported and the exit status is 1. It never declares the queue.
//
// The body is sent exactly as read (decimal strings keep their digits). Messages come from a
// JSON Lines file (one JSON object per line; "-" reads standard input) or from the arguments:
//
//   npm ci && GAPLESS_QUEUE=invoices node producer.js --file messages.jsonl
//   node producer.js '{"invoice_id": "shop-42-1", "tenant": "acme", ...}'
//
// Exit status: 0 every message confirmed, 1 some refused or unconfirmed, 2 bad input or usage.
'use strict';

const fs = require('node:fs');
const amqp = require('amqplib');

const PRIORITIES = { user: 4, batch: 1 };

class BadInput extends Error {}

function usage(problem) {
  process.stderr.write(`producer.js: ${problem}\n` +
    'usage: node producer.js [--priority user|batch] (--file FILE.jsonl | MESSAGE_JSON ...)\n');
  process.exit(2);
}

function parseArgs(argv) {
  const args = { file: null, priority: null, messages: [] };
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    if (arg === '--file' || arg === '--priority') {
      if (i + 1 >= argv.length) usage(`${arg} needs a value`);
      args[arg.slice(2)] = argv[i + 1];
      i += 1;
    } else if (arg.startsWith('--')) {
      usage(`unknown option ${arg}`);
    } else {
      args.messages.push(arg);
    }
  }
  if ((args.file === null) === (args.messages.length === 0)) {
    usage('give --file or messages as arguments (one of them)');
  }
  if (args.priority !== null && !(args.priority in PRIORITIES)) {
    usage('--priority must be user or batch');
  }
  return args;
}

// [where, text] of every message: the file's non-blank lines, or the arguments.
function readMessages(args) {
  if (args.file === null) return args.messages.map((text, i) => [`argument ${i + 1}`, text]);
  const content = fs.readFileSync(args.file === '-' ? 0 : args.file, 'utf8');
  return content.split('\n')
    .map((line, i) => [`line ${i + 1}`, line.trim()])
    .filter(([, line]) => line !== '');
}

function outgoing([where, text], { queue, quorum, priority }) {
  let message;
  try {
    message = JSON.parse(text);
  } catch (error) {
    throw new BadInput(`${where}: not JSON (${error.message}); one JSON object per line`);
  }
  if (message === null || typeof message !== 'object' || Array.isArray(message)
      || typeof message.invoice_id !== 'string') {
    throw new BadInput(`${where}: must be a JSON object with a string invoice_id`);
  }
  const wanted = priority || message.priority || 'batch';
  if (!(wanted in PRIORITIES)) throw new BadInput(`${where}: priority must be "user" or "batch"`);
  const amqpPriority = PRIORITIES[wanted];
  return {
    body: Buffer.from(text, 'utf8'),
    invoiceId: message.invoice_id,
    priority: amqpPriority,
    routingKey: quorum && amqpPriority >= 4 ? `${queue}.user` : queue,
  };
}

// The first node of GAPLESS_AMQP_URL (several, comma-separated: a cluster) that answers.
async function connect(urls) {
  let last;
  for (const url of urls) {
    try {
      return await amqp.connect(url);
    } catch (error) {
      last = error;
    }
  }
  throw last;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const queue = process.env.GAPLESS_QUEUE || 'invoices';
  const quorum = process.env.GAPLESS_QUEUE_TYPE === 'quorum';
  const urls = (process.env.GAPLESS_AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672/')
    .split(',').map((url) => url.trim()).filter((url) => url !== '');
  let messages;
  try {
    messages = readMessages(args).map((entry) => outgoing(entry, { queue, quorum,
      priority: args.priority }));
  } catch (error) {
    if (error instanceof BadInput || error.code) {
      process.stderr.write(`producer.js: ${error.message}\n`);
      return 2;
    }
    throw error;
  }

  let connection;
  try {
    connection = await connect(urls);
  } catch (error) {
    process.stderr.write(`producer.js: no RabbitMQ node answers (${error.message})\n`);
    return 1;
  }
  let failed = 0;
  try {
    // A closed channel or connection settles every confirm still awaited with an error
    // (reported per message below); the events only need a listener.
    connection.on('error', () => {});
    const channel = await connection.createConfirmChannel();
    channel.on('error', () => {});
    // With `mandatory`, an unroutable message comes back (basic.return) before its confirm.
    const returned = new Set();
    channel.on('return', (message) => returned.add(message.properties.messageId));
    const confirms = [];
    for (const message of messages) {
      let settle;
      const confirmed = new Promise((resolve) => { settle = resolve; });
      const sent = channel.publish('', message.routingKey, message.body, {
        contentType: 'application/json',
        deliveryMode: 2,
        priority: message.priority,
        messageId: message.invoiceId,
        appId: 'node-producer',
        mandatory: true,
      }, (error) => settle(error ? 'no confirm (nacked, or the channel closed); publishing it '
                                   + 'again is safe' : null));
      confirms.push(confirmed.then((problem) => [message, problem]));
      // The socket's buffer is full: wait until it drains before writing more.
      if (!sent) await new Promise((drained) => channel.once('drain', drained));
    }
    // Every message is on the wire before any confirm is awaited: confirms are pipelined.
    for (const [message, nacked] of await Promise.all(confirms)) {
      const problem = nacked || (returned.has(message.invoiceId)
        ? `unroutable: no queue '${message.routingKey}' (start a gapless worker first)` : null);
      if (problem === null) {
        process.stdout.write(`confirmed ${message.invoiceId} -> ${message.routingKey} `
                             + `(priority ${message.priority})\n`);
      } else {
        failed += 1;
        process.stderr.write(`refused ${message.invoiceId}: ${problem}\n`);
      }
    }
    await channel.close();
  } catch (error) {
    // The outcome of messages in flight is unknown: publishing again is safe (the worker maps
    // a repeated invoice_id onto the same invoice).
    process.stderr.write(`producer.js: the connection failed (${error.message}); publish `
                         + 'the unconfirmed messages again\n');
    return 1;
  } finally {
    await connection.close().catch(() => {});
  }
  return failed ? 1 : 0;
}

main().then((status) => { process.exitCode = status; }, (error) => {
  process.stderr.write(`producer.js: ${error.stack || error}\n`);
  process.exitCode = 1;
});
