#!/bin/sh
# Makes the TLS test fixtures of src/io/tls.rs (run in tests/data/tls/; OpenSSL 3).
# Every certificate is valid from 2020-01-01 to 2120-01-01 (100 years). The CA keys are
# thrown away: running this again makes a new, equally good set.
set -eu
START=20200101000000Z
END=21200101000000Z
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/ca.cnf" <<CNF
[ca]
default_ca = test
[test]
dir = $work
database = $work/index.txt
new_certs_dir = $work
serial = $work/serial
default_md = sha256
policy = any
copy_extensions = none
unique_subject = no
[any]
commonName = supplied
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,DNS:broker.test,IP:127.0.0.1
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
CNF
sign() { # sign CSR CA-CERT CA-KEY EXTENSIONS OUT [extra args]
  csr=$1 cacert=$2 cakey=$3 ext=$4 out=$5; shift 5
  : > "$work/index.txt"
  openssl rand -hex 16 > "$work/serial"
  openssl ca -batch -config "$work/ca.cnf" -notext -startdate $START -enddate $END \
    -in "$csr" -cert "$cacert" -keyfile "$cakey" -extensions "$ext" -out "$out" "$@" 2>/dev/null
}
ec_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }

# Two CAs: the one the tests trust, and another one ("unknown CA").
for ca in ca other-ca; do
  ec_key "$work/$ca.key"
  openssl req -new -key "$work/$ca.key" -subj "/CN=kafka-consumer test $ca" -out "$work/$ca.csr"
  sign "$work/$ca.csr" /dev/null "$work/$ca.key" v3_ca $ca.pem -selfsign
done
# The broker: names localhost, broker.test and 127.0.0.1.
ec_key server.key
openssl req -new -key server.key -subj "/CN=broker.test" -out "$work/server.csr"
sign "$work/server.csr" ca.pem "$work/ca.key" server server.pem
# The client (mutual TLS): an EC key as PKCS#8 (client.key) and as SEC1
# (client-sec1.key), and a keystore file holding the key and the certificate.
ec_key client.key
openssl req -new -key client.key -subj "/CN=consumer" -out "$work/client.csr"
sign "$work/client.csr" ca.pem "$work/ca.key" client client.pem
openssl ec -in client.key -out client-sec1.key 2>/dev/null
cat client.key client.pem > client-keystore.pem
# An RSA client key in PKCS#1 form, with its certificate.
openssl genrsa -traditional -out client-rsa.key 2048 2>/dev/null
openssl req -new -key client-rsa.key -subj "/CN=consumer-rsa" -out "$work/client-rsa.csr"
sign "$work/client-rsa.csr" ca.pem "$work/ca.key" client client-rsa.pem
# Encrypted keys, which the consumer refuses: PKCS#8 encryption, and the legacy
# PEM encryption (Proc-Type: 4,ENCRYPTED header). Password: test.
openssl pkcs8 -topk8 -in client.key -v2 aes-128-cbc -passout pass:test -out client-encrypted.key
openssl ec -in client.key -aes128 -passout pass:test -out client-legacy-encrypted.key 2>/dev/null
chmod 644 ./*.pem ./*.key
